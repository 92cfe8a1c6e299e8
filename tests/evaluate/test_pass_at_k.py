"""The pass@k stage with a scripted policy in a sandbox whose verifier replays a reward list per
task: scores, pass@k and the paired difference as derived by hand, the errored rule, resume by
(policy, task, run), and a Harbor job directory scored beside the played policies."""

from __future__ import annotations

import csv
import math
import threading
from pathlib import Path

import pytest
from agent_doubles import SUBMIT, FakeSession, bash

from mirl.jsonl import read_jsonl
from mirl.llm import scripted
from mirl.llm.scripted import ScriptedModel
from mirl.params import make
from mirl.runner.stage import StageError
from mirl.sandbox.base import VerifyResult
from tests.conftest import write_task

HARBOR = Path(__file__).resolve().parents[1] / "data" / "harbor" / "jobs"
GEMINI = "mini-swe-agent/google/gemini-3-pro-preview"


class ReplaySession(FakeSession):
    def __init__(self, task, outcome):
        super().__init__(task)
        self.outcome = outcome

    def verify(self):
        if self.outcome == "err":
            return VerifyResult(reward=0.0, exit_code=1, duration_s=0.0, tail="", error="no reward.txt")
        return VerifyResult(reward=self.outcome, exit_code=0, duration_s=0.0, tail="")


class ReplaySandbox:
    """Sessions of a task get its outcomes in the order they start (one worker: plan order)."""

    name = "replay"

    def __init__(self, outcomes):
        self.outcomes = {k: list(v) for k, v in outcomes.items()}
        self.started = 0
        self.lock = threading.Lock()

    def start(self, task):
        with self.lock:
            self.started += 1
            return ReplaySession(task, self.outcomes[task.id].pop(0))


# policy a: alpha 3/3, beta 1/3; policy b: alpha 1/3 (run 1 errored), beta 2/3
# in start order, policies alternating (a run 0, b run 0, a run 1, ...): a gets alpha 1, 1, 1 and beta 1, 0, 0;
# b gets alpha 0, err, 1 and beta 1, 1, 0
OUTCOMES = {"alpha": [1.0, 0.0, 1.0, "err", 1.0, 1.0], "beta": [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]}


@pytest.fixture
def tasks(tmp_path):
    from mirl.tasks import load_task

    return [load_task(write_task(tmp_path / "tasks" / t)) for t in ("alpha", "beta")]


@pytest.fixture
def policies():
    made = [ScriptedModel([bash("ls"), SUBMIT], name=n, cycle=True) for n in ("a", "b")]
    for m in made:
        scripted.register(m)
    yield made
    for m in made:
        scripted.unregister(m.name)


def params(**section):
    base = {"policies": ["scripted/a", "scripted/b"], "runs": 3, "workers": 1}
    return make(agent={"max_steps": 4}, models={"cache": False}, pass_at_k={**base, **section})


def run(p, root, tasks, sandbox):
    from mirl.evaluate.pass_at_k import run_pass_at_k

    return run_pass_at_k(p, root / "run", sandbox=sandbox, tasks=tasks, progress=False)


def table(root, name):
    return list(csv.DictReader((root / "run" / "pass_at_k" / name).open()))


def close(x, want):
    return math.isclose(float(x), want, abs_tol=1e-12)


def test_scores_pass_at_k_and_paired_difference(tmp_path, tasks, policies):
    summary = run(params(), tmp_path, tasks, ReplaySandbox(OUTCOMES))
    assert summary["complete"] and summary["planned"] == 2 * 2 * 3
    episodes = read_jsonl(tmp_path / "run" / "pass_at_k" / "episodes.jsonl")[0]
    # in plan order, policies innermost: a stage stopped early has compared them on the same tasks and runs
    assert [(e["policy"], e["task"], e["run"]) for e in episodes][:4] == [
        ("scripted/a", "alpha", 0), ("scripted/b", "alpha", 0), ("scripted/a", "beta", 0), ("scripted/b", "beta", 0)]
    assert {e["seed"] for e in episodes if e["task"] == "beta"} == {0, 1, 2}
    scores = {r["policy"]: r for r in table(tmp_path, "scores.csv")}
    a, b = scores["scripted/a"], scores["scripted/b"]
    # a: task means 1 and 1/3 -> 2/3; SE sqrt((1/3)(2/3)/2)/2 = 1/6; runs score 1, 1/2, 1/2 -> SE 1/6
    assert close(a["score"], 2 / 3) and close(a["se"], 1 / 6) and close(a["run_mean"], 2 / 3) and close(a["run_se"], 1 / 6)
    # b under errored=zero: the errored trial is a 0; task means 1/3 and 2/3, SE sqrt(2/9)/2; runs all 1/2
    assert close(b["score"], 1 / 2) and close(b["se"], math.sqrt(2) / 6) and int(b["n_errored"]) == 1
    assert close(b["run_mean"], 1 / 2) and close(b["run_se"], 0.0)
    passk = {(r["policy"], int(r["k"])): float(r["mean"]) for r in table(tmp_path, "passk.csv")}
    want = {1: (2 / 3, 1 / 2), 2: (5 / 6, 5 / 6), 3: (1.0, 1.0)}  # pass@k = 1 - C(n-c, k) / C(n, k), by task
    for k, (wa, wb) in want.items():
        assert close(passk[("scripted/a", k)], wa) and close(passk[("scripted/b", k)], wb)
    solved = {(r["policy"], r["task"]): int(r["c"]) for r in table(tmp_path, "passk_tasks.csv")}
    assert solved == {("scripted/a", "alpha"): 3, ("scripted/a", "beta"): 1, ("scripted/b", "alpha"): 1,
                      ("scripted/b", "beta"): 2}
    [paired] = table(tmp_path, "paired.csv")
    # b - a per task: -2/3 and 1/3 -> mean -1/6, SE sd/sqrt(2) = 1/2
    assert paired["policy"] == "scripted/b" and paired["baseline"] == "scripted/a"
    assert close(paired["difference"], -1 / 6) and close(paired["se"], 1 / 2) and int(paired["n_tasks"]) == 2


def test_errored_trials_dropped_when_the_rule_says_so(tmp_path, tasks, policies):
    run(params(errored="drop"), tmp_path, tasks, ReplaySandbox(OUTCOMES))
    b = next(r for r in table(tmp_path, "scores.csv") if r["policy"] == "scripted/b")
    # alpha keeps 2 trials, one passed: task means 1/2 and 2/3, SE sqrt(1/4 + 1/9)/2; run 1 is beta's 1 alone
    assert b["errored_rule"] == "drop" and close(b["score"], 7 / 12) and int(b["n_errored"]) == 1
    assert close(b["se"], math.sqrt(13) / 12) and close(b["run_mean"], 2 / 3)
    # no pass@3 on alpha, so pass@3 is beta's alone
    k3 = next(r for r in table(tmp_path, "passk.csv") if r["policy"] == "scripted/b" and r["k"] == "3")
    assert int(k3["n_short"]) == 1 and int(k3["n_tasks"]) == 1 and close(k3["mean"], 1.0)


def test_resume_plays_only_new_runs(tmp_path, tasks, policies):
    sandbox = ReplaySandbox({"alpha": [1.0] * 8, "beta": [0.0] * 8})
    run(params(runs=2, policies=["scripted/a"]), tmp_path, tasks, sandbox)
    assert sandbox.started == 4
    summary = run(params(runs=3, policies=["scripted/a"]), tmp_path, tasks, sandbox)
    assert sandbox.started == 6 and summary["skipped"] == 4 and summary["new"] == 2
    passk = [int(r["k"]) for r in table(tmp_path, "passk.csv")]
    assert passk == [1, 2, 3]
    # fewer runs: the third run's records stay on disk but out of the tables
    run(params(runs=2, policies=["scripted/a"]), tmp_path, tasks, sandbox)
    assert sandbox.started == 6 and [int(r["k"]) for r in table(tmp_path, "passk.csv")] == [1, 2]


def test_a_harbor_job_is_scored_as_another_policy(tmp_path, tasks, policies):
    summary = run(params(sources=[str(HARBOR)]), tmp_path, tasks, ReplaySandbox(OUTCOMES))
    assert summary["sources"] == [GEMINI] and not summary["source_problems"]
    trials = [r for r in table(tmp_path, "trials.csv") if r["policy"] == GEMINI]
    # three trials of three SWE-bench tasks, each resolved (see tests/data/harbor/SOURCE.md)
    assert sorted(r["task"] for r in trials) == ["django__django-13401", "django__django-16255",
                                                  "matplotlib__matplotlib-24870"]
    gemini = next(r for r in table(tmp_path, "scores.csv") if r["policy"] == GEMINI)
    assert close(gemini["score"], 1.0) and int(gemini["n_tasks"]) == 3 and gemini["se"] == ""  # one trial a task


def test_a_harbor_trial_that_timed_out_keeps_the_reward_its_verifier_gave(tmp_path):
    """Harbor runs the verifier after an agent timeout: the reward stands; an exception without a
    reward (the verifier never ran) is an errored trial."""
    import json
    import shutil

    from mirl.evaluate.pass_at_k import read_source_trials

    jobs = tmp_path / "jobs"
    shutil.copytree(HARBOR, jobs)
    timed, crashed = sorted(p for p in jobs.glob("*/*") if (p / "result.json").exists())[:2]
    for trial, kind in ((timed, "AgentTimeoutError"), (crashed, "RuntimeError")):
        result = json.loads((trial / "result.json").read_text())
        result["exception_info"] = {"exception_type": kind, "exception_message": "x"}
        if kind != "AgentTimeoutError":
            result["verifier_result"] = None
            shutil.rmtree(trial / "verifier", ignore_errors=True)
        (trial / "result.json").write_text(json.dumps(result))
    rows, _ = read_source_trials([str(jobs)])
    got = {r["task"]: (r["reward"], r["error"]) for r in rows}
    assert got[json.loads((timed / "result.json").read_text())["task_name"]] == (1.0, None)
    reward, error = got[json.loads((crashed / "result.json").read_text())["task_name"]]
    assert reward is None and error.startswith("RuntimeError")


def test_two_job_directories_of_one_agent_are_two_runs_of_its_tasks(tmp_path, tasks, policies):
    import shutil

    for copy in ("first", "second"):
        shutil.copytree(HARBOR, tmp_path / copy / "jobs")
    run(params(policies=["scripted/a"], sources=[str(tmp_path / "first"), str(tmp_path / "second")]), tmp_path,
        tasks, ReplaySandbox(OUTCOMES))
    trials = [r for r in table(tmp_path, "trials.csv") if r["policy"] == GEMINI]
    assert sorted((r["task"], r["run"]) for r in trials)[:2] == [("django__django-13401", "0"),
                                                                  ("django__django-13401", "1")]
    assert {r["origin"].split("/")[len(str(tmp_path).split("/"))] for r in trials if r["run"] == "0"} == {"first"}
    gemini = next(r for r in table(tmp_path, "scores.csv") if r["policy"] == GEMINI)
    assert int(gemini["n_runs"]) == 2 and close(gemini["se"], 0.0)  # two passes of every task: no variance
    assert [r["k"] for r in table(tmp_path, "passk.csv") if r["policy"] == GEMINI] == ["1", "2"]
    paired = {r["policy"]: r for r in table(tmp_path, "paired.csv")}
    assert "share no scored task" in paired[GEMINI]["note"]
    with pytest.raises(StageError, match="no such file or directory: /nonexistent/jobs"):
        run(params(sources=["/nonexistent/jobs"]), tmp_path, tasks, ReplaySandbox(OUTCOMES))


def test_bad_params_and_task_sets_are_refused(tmp_path, tasks):
    from dataclasses import replace

    from mirl.evaluate.pass_at_k import PassAtKStage
    from mirl.typed import ParamsError

    with pytest.raises(ParamsError, match=r"pass_at_k\.runs: must be at least 1, got 0"):
        params(runs=0)  # refused as the params are read
    p = params()
    p.pass_at_k = replace(p.pass_at_k, runs=0)  # params made in code: refused when the stage is made
    with pytest.raises(ParamsError, match=r"^pass_at_k\.runs: must be at least 1, got 0$"):
        PassAtKStage(p, tmp_path / "run")
    with pytest.raises(StageError, match="pass_at_k.tasks"):
        PassAtKStage(params(tasks=str(tmp_path / "missing")), tmp_path / "run").plan()
