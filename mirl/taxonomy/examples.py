"""The error steps a curation session shows: which steps a run's taxonomy was made from, a text
search over them, and each step's prefix (the trajectory before it), read only when asked for."""

from __future__ import annotations

import json
from pathlib import Path

from mirl.jsonl import read_jsonl
from mirl.records.error_step import ErrorStep
from mirl.records.loaders import PROFILING, load_error_steps, read_error_steps
from mirl.records.trajectory import Step
from mirl.runner.layout import PARAMS, RunDir

TAXONOMY = "taxonomy"


def run_error_steps(run: str | Path | RunDir) -> tuple[list[ErrorStep], Path | None]:
    """The error steps the run's taxonomy stage labelled, and the file they came from.

    The stage reads `taxonomy.error_steps` when its params name one, else the run's profiling output."""
    run = run if isinstance(run, RunDir) else RunDir(run)
    params = run.file(TAXONOMY, PARAMS)
    source = ""
    if params.exists():
        try:
            source = ((json.loads(params.read_text()).get("params") or {}).get(TAXONOMY) or {}).get("error_steps", "")
        except (json.JSONDecodeError, AttributeError) as e:
            raise ValueError(f"{params}: not the params file of a taxonomy stage: {e}") from None
    if not source:
        return load_error_steps(run), run.file(PROFILING, "error_steps.jsonl")
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"{params}: taxonomy.error_steps names {path}, which does not exist")
    return read_error_steps(path), path


def matches(step: ErrorStep, query: str) -> bool:
    """Whether every word of `query` occurs (case-blind) in the step's id, command, description or reason."""
    text = " ".join([step.id, step.rejected_command or "", step.description, step.reason]).lower()
    return all(word in text for word in query.lower().split())


class Prefixes:
    """The steps before each error step, from the trajectory file its `prefix` names (read once, lazily)."""

    def __init__(self, run: str | Path | RunDir, steps_file: Path | None = None):
        self.run = run if isinstance(run, RunDir) else RunDir(run)
        self.steps_file = steps_file
        self._files: dict[Path, dict[tuple[str, int], list[dict]]] = {}

    def where(self, step: ErrorStep) -> Path | None:
        name = (step.prefix or {}).get("file")
        if not name:
            return None
        candidates = [Path(name)] if Path(name).is_absolute() else [self.run.file(PROFILING, name)]
        if self.steps_file is not None and not Path(name).is_absolute():
            candidates.append(self.steps_file.parent / name)
        return next((p for p in candidates if p.exists()), candidates[0])

    def of(self, step: ErrorStep) -> list[Step]:
        """The trajectory's steps before `step` (empty for a first step); errors say what is missing."""
        path = self.where(step)
        if path is None:
            raise LookupError(f"error step {step.id} names no trajectory file (its prefix is {step.prefix!r})")
        if path not in self._files:
            if not path.exists():
                raise FileNotFoundError(f"{path}: no trajectories, so no prefix for {step.id}")
            rows, _ = read_jsonl(path)
            self._files[path] = {(r.get("task"), r.get("seed")): r.get("steps") or [] for r in rows}
        key = (step.prefix.get("task", step.env), step.prefix.get("seed", step.seed))
        if key not in self._files[path]:
            raise LookupError(f"{path}: no trajectory of task {key[0]!r} seed {key[1]} (prefix of {step.id})")
        return [Step.from_dict(s) for s in self._files[path][key][:int(step.prefix.get("steps", step.step))]]
