"""Detector records and the registry they live in (`catalog` picks and runs them).

A detector is a deterministic function over one trajectory that returns flags (step index,
evidence). It carries a name and a definition written like a taxonomy entry (what the
misbehavior is and what it is not), so rule flags and LLM-found error types can be compared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from mirl.records.trajectory import Trajectory


@dataclass(frozen=True)
class Flag:
    """One flagged step: its 0-based index among the agent's actions and why."""

    step: int
    evidence: str


@dataclass(frozen=True)
class Detector:
    name: str  # kebab-case, stable: used on the command line and in files
    definition: str
    check: Callable[[Trajectory], list[Flag]]

    def __call__(self, traj: Trajectory) -> list[Flag]:
        return self.check(traj)


@dataclass(frozen=True)
class Finding:
    """A flag with enough context to read on its own (one JSON line of `mirl detect --json`)."""

    file: str
    task: str
    seed: int
    step: int
    command: str
    detector: str
    evidence: str

    def to_dict(self) -> dict:
        return asdict(self)


DETECTORS: dict[str, Detector] = {}


def detector(name: str, definition: str) -> Callable[[Callable[[Trajectory], list[Flag]]], Detector]:
    """Decorator registering a rule under `name`."""

    def wrap(fn: Callable[[Trajectory], list[Flag]]) -> Detector:
        if name in DETECTORS:
            raise ValueError(f"detector {name!r} registered twice")
        det = Detector(name=name, definition=" ".join(definition.split()), check=fn)
        DETECTORS[name] = det
        return det

    return wrap
