"""Trajectory sources: read agent logs of any supported format as `Trajectory` records.

One seam for every consumer (`mirl detect`, `mirl rollout import`, profiling and taxonomy stages):
`find_sources` turns command-line paths into sources (files, or trial directories that hold one
episode spread over several files), `read_source` reads one into trajectories. Each format lives in
its own module: `jsonl` (ours), `miniswe` (mini-swe-agent .traj.json and chat message lists),
`atif` (Harbor's Agent Trajectory Interchange Format), `harbor` (Harbor job and trial directories)
and `tb1` (Terminal-Bench 1 run directories). A file no reader knows gets one error line naming it
and the formats tried.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from mirl.records.trajectory import Trajectory
from mirl.sources import harbor, tb1
from mirl.sources.base import FORMATS, TrajectoryFileError
from mirl.sources.files import PATTERNS, read_document, read_file


def _trial_kind(d: Path) -> str | None:
    if harbor.is_trial_dir(d):
        return "harbor"
    if tb1.is_trial_dir(d):
        return "tb1"
    return None


def _walk(root: Path, out: list[Path]) -> None:
    if _trial_kind(root):
        out.append(root)
        return
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return
    for e in entries:
        if e.is_dir() and not e.is_symlink():
            _walk(e, out)
        elif e.is_file() and any(e.match(p) for p in PATTERNS):
            out.append(e)


def find_sources(paths: Iterable[str | Path]) -> list[Path]:
    """Files named on the command line; directories searched recursively for every known format."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found: list[Path] = []
            _walk(p, found)
            out.extend(found)
        else:
            out.append(p)
    return out


def read_source(path: str | Path) -> list[Trajectory]:
    """All trajectories in one file or trial directory; `TrajectoryFileError` names it and the problem."""
    path = Path(path)
    if path.is_dir():
        kind = _trial_kind(path)
        if kind == "harbor":
            return [harbor.read_trial(path)]
        if kind == "tb1":
            return [tb1.read_trial(path)]
        raise TrajectoryFileError(f"{path}: a directory that is not a Harbor or Terminal-Bench 1 trial; "
                                  f"give it to `find_sources` to search it")
    return read_file(path)


__all__ = ["FORMATS", "PATTERNS", "TrajectoryFileError", "find_sources", "read_document", "read_source"]
