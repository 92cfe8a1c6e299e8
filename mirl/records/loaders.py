"""Typed loaders of stage outputs: a stage asks for records by run, not by file name."""

from __future__ import annotations

from pathlib import Path

from mirl.jsonl import read_jsonl
from mirl.records.error_step import ErrorStep
from mirl.runner.layout import RunDir

PROFILING = "profiling"
ERROR_STEPS = "error_steps.jsonl"


def error_steps_path(run: str | Path | RunDir) -> Path:
    run = run if isinstance(run, RunDir) else RunDir(run)
    return run.file(PROFILING, ERROR_STEPS)


def load_error_steps(run: str | Path | RunDir) -> list[ErrorStep]:
    """The error steps of a run's profiling stage (empty when it flagged nothing)."""
    path = error_steps_path(run)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no error steps (run the profiling stage first)")
    return read_error_steps(path)


def read_error_steps(path: str | Path) -> list[ErrorStep]:
    """Error steps from any error_steps.jsonl (e.g. one made from a user's own agent logs)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such error-steps file")
    rows, _ = read_jsonl(path)
    out = []
    for i, row in enumerate(rows, 1):
        try:
            out.append(ErrorStep.from_dict(row))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: record {i} is not an error step: {e}") from None
    return out


def error_steps_frame(steps: list[ErrorStep]):
    """One row per error step, with its id (a pandas DataFrame)."""
    import pandas as pd

    return pd.DataFrame([{"id": s.id, **s.to_dict()} for s in steps])


def profiled_environments(run: str | Path | RunDir) -> int | None:
    """How many environments the run's profiling stage played (its summary); None before it ran."""
    run = run if isinstance(run, RunDir) else RunDir(run)
    summary = run.read_summary(PROFILING)
    value = (summary or {}).get("environments")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None
