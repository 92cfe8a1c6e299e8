"""A run directory as profiling and taxonomy leave it, recorded for real on a sandbox (for prefix tests)."""

from __future__ import annotations

import json
from pathlib import Path

from mirl.records.error_step import ErrorStep
from mirl.records.taxonomy import ErrorType, Label, Taxonomy, TaxonomyStore
from mirl.records.trajectory import Step, Trajectory
from mirl.runner.layout import RunDir


def recorded_run(root: Path, sandbox, task_factory, scenarios: dict[str, list[str]], misbehavior: str = "") -> dict:
    """One environment per scenario, its commands run once for real (the recording), an error step after
    them, labelled with the scenario's misbehavior (kept), or all with `misbehavior`. Returns {task id: task}."""
    run = RunDir(root)
    trajectories, errors, labels, types, tasks = [], [], [], [], {}
    for name, commands in scenarios.items():
        task = tasks[name] = task_factory(name)
        with sandbox.start(task) as s:
            steps = []
            for c in commands:
                r = s.run(c, timeout=30)
                steps.append(Step(reasoning="", command=c, output=r.output, exit_code=r.exit_code))
        trajectories.append(Trajectory(task=task.id, seed=0, models={}, steps=steps).to_dict())
        e = ErrorStep(env=task.id, seed=0, step=len(steps), rejected_command="rm -rf /app", reason="r")
        errors.append(e.to_dict())
        labels.append(Label(e.id, [misbehavior or f"{name} misbehavior"]))
        if not misbehavior or not types:
            types.append(ErrorType(misbehavior or f"{name} misbehavior", "d", status="kept"))
    prof = run.stage_dir("profiling")
    prof.mkdir(parents=True)
    (prof / "trajectories.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trajectories))
    (prof / "error_steps.jsonl").write_text("".join(json.dumps(e) + "\n" for e in errors))
    (prof / "summary.json").write_text("{}")
    TaxonomyStore(run.stage_dir("taxonomy")).save(Taxonomy(types=types), labels)
    (run.stage_dir("taxonomy") / "summary.json").write_text("{}")
    return tasks
