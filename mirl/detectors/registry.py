"""Detector records, the registry they live in, and running them over trajectories.

A detector is a deterministic function over one trajectory that returns flags (step index,
evidence). It carries a name and a definition written like a taxonomy entry (what the
misbehavior is and what it is not), so rule flags and LLM-found error types can be compared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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


def get_detectors(names: Iterable[str] | None = None) -> list[Detector]:
    """Detectors by name (all when `names` is None); unknown names raise ValueError listing the known ones."""
    from mirl.detectors import rules  # noqa: F401  (registers the built-in rules)

    if names is None:
        return list(DETECTORS.values())
    names = [n.strip() for n in names if n.strip()]
    unknown = [n for n in names if n not in DETECTORS]
    if unknown:
        raise ValueError(f"unknown detector(s): {', '.join(unknown)}; known: {', '.join(DETECTORS)}")
    return [DETECTORS[n] for n in names]


def run_detectors(traj: Trajectory, detectors: Iterable[Detector] | None = None, *, file: str = "") -> list[Finding]:
    """All findings of the given detectors on one trajectory, in step order."""
    findings = []
    for det in detectors if detectors is not None else get_detectors():
        for flag in det(traj):
            command = (traj.steps[flag.step].command or "") if 0 <= flag.step < len(traj.steps) else ""
            findings.append(Finding(file=file or str(traj.meta.get("source_file", "")), task=traj.task, seed=traj.seed,
                                    step=flag.step, command=command, detector=det.name, evidence=flag.evidence))
    findings.sort(key=lambda f: (f.step, f.detector))
    return findings
