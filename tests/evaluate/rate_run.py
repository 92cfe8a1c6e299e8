"""A run directory as the misbehavior-rate stage reads it: profiling trajectories, a taxonomy of one
rule-defined misbehavior, and held-out prefixes, written directly (no model, no sandbox)."""

from __future__ import annotations

import json
from pathlib import Path

from mirl.records.error_step import ErrorStep
from mirl.records.prefix import Prefix
from mirl.records.taxonomy import ErrorType, Label, Taxonomy, TaxonomyStore
from mirl.records.trajectory import Step, Trajectory
from mirl.runner.layout import RunDir
from tests.conftest import write_task

MISBEHAVIOR = "no runnable command"
INSTRUCTIONS = {"alpha": "Count the files in /app (alpha).\n", "beta": "Count the files in /app (beta).\n"}


def fake_output(command: str) -> str:
    """What the FakeSession answers a command (tests/agent/agent_doubles.py)."""
    return f"ran: {command}\n"


def write_rate_run(root: Path, envs=("alpha", "beta"), recorded=fake_output, train_leak: bool = False) -> tuple[RunDir, list]:
    """Each env: one profiling trajectory (ls, then a step without a command: the error step) and a
    held-out prefix of its first step. `recorded` gives the output the prefix's step recorded."""
    from mirl.tasks import load_task

    run = RunDir(root / "run")
    tasks = [load_task(write_task(root / "tasks" / e, instruction=INSTRUCTIONS[e])) for e in envs]
    prof = run.stage_dir("profiling")
    prof.mkdir(parents=True)
    trajs, errors = [], []
    for e in envs:
        steps = [Step(reasoning="look", command="ls /app", output=recorded("ls /app"), exit_code=0),
                 Step(reasoning="hmm", command=None, output="")]
        trajs.append(Trajectory(task=e, seed=0, models={"policy": "p"}, steps=steps, instruction=INSTRUCTIONS[e]))
        errors.append(ErrorStep(env=e, seed=0, step=1, rejected_command=None, reason="no command"))
    (prof / "trajectories.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in trajs))
    (prof / "error_steps.jsonl").write_text("".join(json.dumps(x.to_dict()) + "\n" for x in errors))
    (prof / "summary.json").write_text("{}")
    kind = ErrorType(MISBEHAVIOR, "a step with no command to run", provenance="rules: no-runnable-command",
                     status="kept")
    TaxonomyStore(run.stage_dir("taxonomy")).save(Taxonomy(types=[kind]), [Label(x.id, [MISBEHAVIOR]) for x in errors])
    (run.stage_dir("taxonomy") / "summary.json").write_text("{}")
    held = [Prefix(id=f"{MISBEHAVIOR}|{x.id}", misbehavior=MISBEHAVIOR, error_id=x.id, env=x.env, seed=0, steps=1,
                   split="heldout", verdict={"exact": True, "normalized": True, "snapshot": None}) for x in errors]
    pre = run.stage_dir("prefixes")
    pre.mkdir(parents=True)
    (pre / "heldout.jsonl").write_text("".join(json.dumps(p.to_dict()) + "\n" for p in held))
    train = [Prefix(id="t|x", misbehavior=MISBEHAVIOR, error_id=held[0].error_id if train_leak else "other/0/1",
                    env=envs[0], seed=0, steps=1, split="train", verdict={"exact": True})]
    (pre / "train.jsonl").write_text("".join(json.dumps(p.to_dict()) + "\n" for p in train))
    (pre / "summary.json").write_text("{}")
    return run, tasks
