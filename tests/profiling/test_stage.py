"""The stage: error steps derived from trajectories, the summary, and resuming after a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from agent_doubles import FakeSandbox

from mirl.llm.scripted import ScriptedModel
from mirl.params import make
from mirl.profiling.stage import load_error_steps, run_profiling
from mirl.tasks import load_task

REPO = Path(__file__).resolve().parents[2]
TASKS = ["count-lines", "fix-permissions", "dedupe-sort-list"]
REPLIES = ["Let me look.\n```bash\nls -la\n```", "I am not sure what to do.",
           "Done.\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"]


def tasks():
    return [load_task(REPO / "tasks" / t) for t in TASKS]


def test_stage_outputs(tmp_path):
    p = make(profiling={"seeds": 2, "workers": 2}, agent={"max_steps": 6})
    summary = run_profiling(p, tmp_path, tasks=tasks(), sandbox=FakeSandbox(),
                            policy=ScriptedModel(REPLIES, cycle=True))
    assert summary["episodes"] == 6 and summary["environments"] == 3
    errors = load_error_steps(tmp_path)
    assert len(errors) == summary["flags"] > 0
    # the scripted reply without a command is always flagged and replaced by the reference solution
    assert set(errors["source"]) >= {"rules:no-runnable-command"}
    assert errors["rejected_command"].isna().any() and errors["correction"].notna().all()
    assert 0 < summary["flag_rate"] <= 1
    row = errors.iloc[0]
    assert row["prefix"]["task"] == row["env"] and row["prefix"]["steps"] == row["step"]


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
    errors = load_error_steps(run)
    straight = load_error_steps(reference)
    key = ["env", "seed", "step"]
    assert not errors.duplicated(key).any()
    assert sorted(map(tuple, errors[key].values)) == sorted(map(tuple, straight[key].values))


def test_progress_fields_count_steps_flags_and_spend(tmp_path):
    from mirl.agent.trajectory import Step, Trajectory
    from mirl.profiling.stage import ProfilingStage

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
