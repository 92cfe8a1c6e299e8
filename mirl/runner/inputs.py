"""What a stage reads from the stages before it, in one place: the task pool profiling ran on, the
profiled trajectories, the taxonomy, the kept prefixes and the training run's checkpoints. Stages
import these instead of each other's modules, so every stage output has one reader to keep right."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from mirl.jsonl import read_jsonl
from mirl.records.prefix import Prefix
from mirl.records.taxonomy import TaxonomyStore
from mirl.records.trajectory import Trajectory, load_trajectories
from mirl.runner.layout import RunDir

if TYPE_CHECKING:
    from mirl.tasks import Task

PROFILING, TAXONOMY, PREFIX_STAGE, TRAINING = "profiling", "taxonomy", "prefixes", "training"
TRAJECTORIES = "trajectories.jsonl"
PREFIXES, TRAIN, HELDOUT = "prefixes.jsonl", "train.jsonl", "heldout.jsonl"
CHECKPOINTS = "checkpoints"


def _run(run: str | Path | RunDir) -> RunDir:
    return run if isinstance(run, RunDir) else RunDir(run)


def task_pool(run: RunDir, pool: str, prefer_stored: bool = True) -> list[Task]:
    """The tasks of a comma-separated pool of task dirs; with `prefer_stored`, the pool the profiling
    stage of `run` ran on, as its stored params say (later stages must see the same tasks)."""
    from mirl.agent.rollout import RolloutConfig, load_tasks  # the harness loads with a pool, not the runner

    stored = run.params(PROFILING)
    if prefer_stored and stored.exists():
        pool = (json.loads(stored.read_text()).get("params") or {}).get(PROFILING, {}).get("tasks", pool)
    return load_tasks(RolloutConfig(tasks=[t.strip() for t in pool.split(",") if t.strip()]))


def trajectories_path(run: str | Path | RunDir) -> Path:
    """The profiling stage's trajectories file."""
    return _run(run).file(PROFILING, TRAJECTORIES)


def profiled_trajectories(run: str | Path | RunDir) -> dict[tuple[str, int], Trajectory]:
    """The profiling stage's trajectories by (task, seed)."""
    return {t.key: t for t in load_trajectories(trajectories_path(run))}


def taxonomy_store(run: str | Path | RunDir) -> TaxonomyStore:
    """The taxonomy versions of a run (stage 02's output, curated by hand)."""
    return TaxonomyStore(_run(run).stage_dir(TAXONOMY))


def load_prefixes(run_dir: str | Path | RunDir, which: str = PREFIXES) -> list[Prefix]:
    """The prefixes of stage 03: every checked one (`PREFIXES`), or the kept `TRAIN` / `HELDOUT` split."""
    path = _run(run_dir).file(PREFIX_STAGE, which)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no prefixes (run the prefix stage first)")
    return [Prefix.from_dict(r) for r in read_jsonl(path)[0]]


# What a checkpoint keeps for resuming, beside its weights (the newest checkpoint only): the embedded
# learner's optimizer file and DeepSpeed's partitioned state. Not part of what the weights are.
RESUME_STATE = ("optimizer.pt", "zero")


def checkpoint_dir(root: Path, step: int) -> Path:
    """Where the training stage keeps the checkpoint of `step` under its checkpoints directory."""
    return Path(root) / f"step-{step:06d}"


def training_selection(run: str | Path | RunDir) -> tuple[Path, dict | None]:
    """(the path of, and) the training stage's checkpoint selection (`selection.json`); None when the
    training stage has not written one."""
    path = _run(run).file(TRAINING, "selection.json")
    if not path.exists():
        return path, None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        from mirl.runner.stage import StageError

        raise StageError(f"{path}: not a readable checkpoint selection (a JSON object with a `top` list)")
    return path, data


def selected_step(run: str | Path | RunDir) -> tuple[Path, int | None]:
    """(the path of the selection, and) the step of the training stage's selected checkpoint: the
    validation's pick when it ran and rated one (`selected`), else the best by smoothed reward (the
    first of `top`); None when training selected none."""
    from mirl.runner.stage import StageError

    path, selection = training_selection(run)
    top = (selection or {}).get("top") or []
    if not isinstance(top, list):
        raise StageError(f"{path}: not a readable checkpoint selection (JSON with a `top` list)")
    if not top:
        return path, None
    step = (selection or {}).get("selected")
    if step is None:
        step = top[0].get("step") if isinstance(top[0], dict) else None
    if not isinstance(step, int) or isinstance(step, bool):
        raise StageError(f"{path}: the selected checkpoint has no integer step: {step!r}")
    return path, step


class EpisodeInputs:
    """The accessors of a stage that plays episodes on profiled tasks, read once and kept: the task
    pool profiling ran on, its trajectories by (task, seed), and the sandbox of `params.sandbox`. A
    stage may set `_tasks` or `_sandbox` first (a caller's own task list or sandbox)."""

    _tasks: list[Task] | None = None
    _trajectories: dict[tuple[str, int], Trajectory] | None = None
    _sandbox = None

    def warm_up(self) -> None:
        """litellm imported before the episodes start (each would otherwise wait on the first one's
        import, seconds under the GIL); the inputs and the sandbox stay lazy: not every such stage uses
        them (step profiling runs no sandbox, pass@k reads no profiled trajectories)."""
        from mirl.llm import providers

        providers.install()

    def tasks(self) -> dict[str, Task]:
        if self._tasks is None:
            self._tasks = task_pool(self.run, self.params.profiling.tasks)
        return {t.id: t for t in self._tasks}

    def trajectories(self) -> dict[tuple[str, int], Trajectory]:
        if self._trajectories is None:
            self._trajectories = profiled_trajectories(self.run)
        return self._trajectories

    def sandbox(self):
        if self._sandbox is None:
            from mirl.sandbox.select import make_sandbox

            self._sandbox = make_sandbox(self.params.sandbox)
        return self._sandbox
