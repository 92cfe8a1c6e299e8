"""The stage: error steps derived from trajectories, the summary, and resuming after a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from agent_doubles import FakeSandbox

from mirl.llm.scripted import ScriptedModel
from mirl.params import make
from mirl.profiling.stage import error_steps_table, load_trajectories, run_profiling
from mirl.tasks import load_task

REPO = Path(__file__).resolve().parents[2]
TASKS = ["count-lines", "fix-permissions", "dedupe-sort-list"]
REPLIES = ["Let me look.\n```bash\nls -la\n```", "I am not sure what to do.",
           "Done.\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"]


def error_steps(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "profiling" / "error_steps.jsonl").read_text().splitlines()]


def tasks():
    return [load_task(REPO / "tasks" / t) for t in TASKS]


def test_stage_outputs(tmp_path):
    p = make(profiling={"seeds": 2, "workers": 2}, agent={"max_steps": 6})
    summary = run_profiling(p, tmp_path, tasks=tasks(), sandbox=FakeSandbox(),
                            policy=ScriptedModel(REPLIES, cycle=True))
    trajectories = load_trajectories(tmp_path)
    assert sorted((t["task"], t["seed"]) for t in trajectories) == sorted((t, s) for t in TASKS for s in (0, 1))
    steps = [(t["task"], t["seed"], i, s) for t in trajectories for i, s in enumerate(t["steps"])]
    # here every flagged step was corrected by the reference solution, so flagged steps are the teacher's
    flagged = {(task, seed, i): s for task, seed, i, s in steps if s["source"] == "teacher"}
    errors = error_steps(tmp_path)
    assert sorted((r["env"], r["seed"], r["step"]) for r in errors) == sorted(flagged)
    assert summary["episodes"] == 6 and summary["environments"] == 3 and summary["steps"] == len(steps)
    assert summary["flags"] == len(flagged) and summary["flag_rate"] == round(len(flagged) / len(steps), 4)
    assert summary["exit_reasons"] == {"submitted": 6} and summary["mean_reward"] == 1.0
    # the scripted reply without a command is always flagged, and replaced by the reference solution
    unsure = [s for *_, s in steps if (s["meta"].get("proposed") or s)["raw"] == REPLIES[1]]
    assert unsure and all(s["meta"]["flag"]["source"] == "rules:no-runnable-command" for s in unsure)
    for row in errors:
        step = flagged[(row["env"], row["seed"], row["step"])]
        assert row["rejected_command"] == step["meta"]["flag"]["rejected_command"] == step["meta"]["proposed"]["command"]
        assert row["correction"] == step["command"] and row["outcome"] == "corrected"
        assert row["prefix"] == {"file": "trajectories.jsonl", "task": row["env"], "seed": row["seed"],
                                 "steps": row["step"]}
    by_source = Counter(s["meta"]["flag"]["source"] for s in flagged.values())
    assert summary["flags_by_source"] == dict(by_source)


def test_discarded_step_is_an_error_row(tmp_path):
    from dataclasses import replace

    from agent_doubles import make_task

    # every step of this reference solution kills by name unseen, which the rules reject: after
    # teacher_tries rejected corrections the episode is discarded, and the flag is still an error step
    solve = tmp_path / "solve.sh"
    solve.write_text("pkill python\npkill node\npkill ruby\n")
    task = replace(make_task(tmp_path, "killer"), solution=solve)
    p = make(profiling={"seeds": 1, "workers": 1, "teacher_tries": 2}, agent={"max_steps": 6})
    summary = run_profiling(p, tmp_path, tasks=[task], sandbox=FakeSandbox(), policy=ScriptedModel(REPLIES[:2]))
    [t] = load_trajectories(tmp_path)
    assert t["exit_reason"] == "discarded" and [s["command"] for s in t["steps"]] == ["ls -la"]
    [row] = error_steps(tmp_path)
    assert (row["step"], row["outcome"], row["correction"], row["attempts"]) == (1, "discarded", None, 2)
    assert row["source"] == "rules:no-runnable-command" and row["rejected_command"] is None
    assert summary["discarded"] == 1 and summary["flags"] == 1 and summary["flag_rate"] == 1.0


KILL_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {doubles!r})
    from agent_doubles import FakeSandbox
    from mirl.llm.scripted import ScriptedModel
    from mirl.params import make
    from mirl.profiling.stage import run_profiling
    from mirl.tasks import find_tasks, load_task
    tasks = [load_task(p) for p in find_tasks({tasks!r})][:6]
    p = make(profiling={{"seeds": 2, "workers": 1}}, agent={{"max_steps": 6}})
    run_profiling(p, {run!r}, tasks=tasks, sandbox=FakeSandbox(delay_s={delay}),
                  policy=ScriptedModel({replies!r}, cycle=True))
""")


def _script(run: Path, delay: float) -> str:
    return KILL_SCRIPT.format(doubles=str(REPO / "tests" / "agent"), tasks=str(REPO / "tasks"), run=str(run),
                              delay=delay, replies=REPLIES)


def test_resume_after_kill_loses_and_duplicates_nothing(tmp_path):
    run = tmp_path / "killed"
    traj = run / "profiling" / "trajectories.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", _script(run, 0.3)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not traj.exists() or len(traj.read_text().splitlines()) < 3):
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = len(traj.read_text().splitlines())
    assert 3 <= before < 12, "the kill should land mid-stage"

    subprocess.run([sys.executable, "-c", _script(run, 0.0)], check=True, capture_output=True, timeout=300)
    records = [json.loads(line) for line in traj.read_text().splitlines()]
    keys = [(r["task"], r["seed"]) for r in records]
    assert len(keys) == len(set(keys)) == 12

    reference = tmp_path / "straight"
    subprocess.run([sys.executable, "-c", _script(reference, 0.0)], check=True, capture_output=True, timeout=300)
    errors = error_steps_table(run)
    straight = error_steps_table(reference)
    key = ["env", "seed", "step"]
    assert not errors.duplicated(key).any()
    assert sorted(map(tuple, errors[key].values)) == sorted(map(tuple, straight[key].values))


def test_progress_fields_count_steps_flags_and_spend(tmp_path):
    from mirl.profiling.stage import ProfilingStage
    from mirl.records.trajectory import Step, Trajectory

    flagged = Step("", "ls", "", 0, source="teacher", meta={"flag": {"rejected_command": None, "reason": "r"}})
    stage = ProfilingStage(make(), tmp_path)
    stage.progress(Trajectory(task="a", seed=0, models={}, steps=[Step("", "pwd", "/", 0), flagged]).to_dict())
    out = stage.progress(Trajectory(task="b", seed=0, models={}, steps=[Step("", "x", "", 0), Step("", "y", "", 0)],
                                    prefix_len=1).to_dict())
    assert out["steps"] == 3 and out["flags/step"] == "0.33" and out["spend"] == "$0.00"


def test_resuming_with_another_policy_setting_is_refused(tmp_path):
    from mirl.runner import ParamsMismatch

    def run(temperature, **kw):
        p = make(profiling={"seeds": 1, "workers": 1}, agent={"max_steps": 3},
                 models={"policy": {"temperature": temperature}})
        return run_profiling(p, tmp_path, tasks=tasks()[:1], sandbox=FakeSandbox(),
                             policy=ScriptedModel(REPLIES, cycle=True), progress=False, **kw)

    run(0.5)
    before = (tmp_path / "profiling" / "trajectories.jsonl").read_text()
    with pytest.raises(ParamsMismatch, match=r"models\.policy\.temperature: 0\.5 -> 0\.9"):
        run(0.9)
    assert (tmp_path / "profiling" / "trajectories.jsonl").read_text() == before
    assert run(0.9, force=True)["new"] == 1
