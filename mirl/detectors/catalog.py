"""The detectors to run, by name, and their findings on a trajectory: above the registry and the
built-in rules, so importing this module is what registers them."""

from __future__ import annotations

from collections.abc import Iterable

from mirl.detectors import rules  # noqa: F401  (registers the built-in rules)
from mirl.detectors.registry import DETECTORS, Detector, Finding
from mirl.records.trajectory import Trajectory


def get_detectors(names: Iterable[str] | None = None) -> list[Detector]:
    """Detectors by name (all when `names` is None); unknown names raise ValueError listing the known ones."""
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
