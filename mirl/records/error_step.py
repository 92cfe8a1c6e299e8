"""The error-step record: one flagged step of a trajectory, what stages after profiling work on.

Written by the profiling stage (`runs/<run>/profiling/error_steps.jsonl`) or made from any agent log
the kit reads plus a localizer's flags; read by the taxonomy and prefix stages through
`mirl.records.load_error_steps`, never as loose dicts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

ERROR_STEP_SCHEMA = 1


@dataclass
class ErrorStep:
    """A step the localizer judged bad, with where it happened (its prefix) and what replaced it."""

    env: str  # the task (environment) id
    seed: int
    step: int  # index of the flagged step in its trajectory; the prefix is steps[:step]
    rejected_command: str | None  # None: the reply had no runnable command
    reason: str  # the localizer's one-line reason: the field that carries most of the signal
    description: str = ""  # one line on what the rejected command does
    source: str = ""  # which judge flagged it, e.g. rules:no-runnable-command or llm:<model>
    detectors: list[str] = field(default_factory=list)  # every judge that flagged it
    correction: str | None = None  # the teacher's replacement command (None: the rollout was discarded)
    outcome: str = "corrected"  # corrected | discarded
    attempts: int = 0  # teacher tries
    prefix: dict[str, Any] = field(default_factory=dict)  # {file, task, seed, steps}: where the prefix lives
    schema: int = ERROR_STEP_SCHEMA

    @property
    def id(self) -> str:
        """Stable across runs of the same trajectories: `<env>/<seed>/<step>`."""
        return f"{self.env}/{self.seed}/{self.step}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ErrorStep:
        schema = int(d.get("schema", ERROR_STEP_SCHEMA))
        if schema > ERROR_STEP_SCHEMA:
            raise ValueError(f"error step written by a newer mirl (schema {schema} > {ERROR_STEP_SCHEMA})")
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
