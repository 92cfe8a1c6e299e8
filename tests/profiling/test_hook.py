"""The profiling hook: pass good steps, replace bad ones, discard after the teacher's 3 failures."""

from __future__ import annotations

from agent_doubles import make_task

from mirl.agent.config import SUBMIT_MARKER, AgentConfig
from mirl.agent.hooks import Discard, StepContext
from mirl.profiling.hook import ProfilingHook
from mirl.records.trajectory import Step
from mirl.roles.localizer import Verdict


class BadIf:
    """Localizer double: bad when the command contains a marker word."""

    def __init__(self, word: str):
        self.word, self.seen = word, []

    def judge(self, task, history, proposed):
        self.seen.append(proposed.command)
        if proposed.command is None or self.word in proposed.command:
            return Verdict("bad", f"contains {self.word}", "a command", "test")
        return Verdict("good", "fine", "a command", "test")


class ListTeacher:
    def __init__(self, commands):
        self.commands, self.calls = list(commands), []

    def correct(self, task, history, rejected, episode):
        self.calls.append([s.command for s, _ in rejected])
        if not self.commands:
            return None
        return Step(reasoning="fix", command=self.commands.pop(0), source="teacher")


def ctx(tmp_path, command, steps=()):
    return StepContext(task=make_task(tmp_path), seed=1, messages=[], steps=list(steps),
                       proposed=Step(reasoning="r", command=command), config=AgentConfig())


def test_good_step_runs_unchanged(tmp_path):
    c = ctx(tmp_path, "ls -la")
    out = ProfilingHook(BadIf("rm"), ListTeacher([])).review(c)
    assert out is c.proposed and out.meta["localizer"]["verdict"] == "good"


def test_bad_step_is_replaced_and_flag_travels_with_correction(tmp_path):
    c = ctx(tmp_path, "rm -rf data", steps=[Step("", "ls", "a\n", 0)])
    out = ProfilingHook(BadIf("rm"), ListTeacher(["cat data/a"])).review(c)
    assert isinstance(out, Step) and out.command == "cat data/a" and out.source == "teacher"
    flag = out.meta["flag"]
    assert flag["step"] == 1 and flag["rejected_command"] == "rm -rf data"
    assert flag["reason"] == "contains rm" and flag["correction"] == "cat data/a"
    assert [a["verdict"] for a in flag["attempts"]] == ["good"]


def test_three_failed_corrections_discard(tmp_path):
    teacher = ListTeacher(["rm a", "rm b", "rm c", "cat ok"])
    c = ctx(tmp_path, "rm -rf data")
    out = ProfilingHook(BadIf("rm"), teacher, tries=3).review(c)
    assert isinstance(out, Discard) and "3 times" in out.reason
    flag = c.proposed.meta["flag"]
    assert flag["correction"] is None and len(flag["attempts"]) == 3
    # each retry shows the teacher everything rejected so far
    assert teacher.calls == [["rm -rf data"], ["rm -rf data", "rm a"], ["rm -rf data", "rm a", "rm b"]]
    assert teacher.commands == ["cat ok"]  # a 4th try is never asked


def test_second_try_accepted(tmp_path):
    out = ProfilingHook(BadIf("rm"), ListTeacher(["rm a", "cat x"])).review(ctx(tmp_path, "rm y"))
    assert out.command == "cat x" and len(out.meta["flag"]["attempts"]) == 2


def test_exhausted_reference_submits(tmp_path):
    out = ProfilingHook(BadIf("rm"), ListTeacher([])).review(ctx(tmp_path, None))
    assert out.command == f"echo {SUBMIT_MARKER}" and out.meta["flag"]["rejected_command"] is None
