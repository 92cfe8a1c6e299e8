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

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mirl.records.trajectory import Trajectory
from mirl.sources.base import FORMATS, TrajectoryFileError

# file names a directory search picks up (trial directories are recognised by their result files)
PATTERNS = ("*.traj.json", "*.traj", "*.jsonl", "trajectory.json", "*.trajectory.json", "*.atif.json")


def _trial_kind(d: Path) -> str | None:
    from mirl.sources import harbor, tb1

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
            from mirl.sources.harbor import read_trial
            return [read_trial(path)]
        if kind == "tb1":
            from mirl.sources.tb1 import read_trial
            return [read_trial(path)]
        raise TrajectoryFileError(f"{path}: a directory that is not a Harbor or Terminal-Bench 1 trial; "
                                  f"give it to `find_sources` to search it")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise TrajectoryFileError(f"{path}: cannot read: {e.strerror or e}") from None
    if not text.strip():
        raise TrajectoryFileError(f"{path}: file is empty")
    from mirl.sources import jsonl

    if path.name.endswith(".jsonl"):
        return jsonl.read_text(path, text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        if "\n" in text.strip():  # perhaps JSONL under another name
            return jsonl.read_text(path, text)
        raise TrajectoryFileError(f"{path}: not valid JSON") from None
    traj = read_document(path, data)
    traj.meta.setdefault("source_file", str(path))
    return [traj]


def _name(path: Path) -> str:
    name = path.name
    for suffix in (".traj.json", ".trajectory.json", ".atif.json", ".json", ".traj"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def read_document(path: Path, data: Any) -> Trajectory:
    """One parsed JSON document, whichever of the known formats it is."""
    from mirl.sources import atif, jsonl, miniswe

    for reader in (atif, miniswe, jsonl):
        if reader.sniff(data):
            try:
                return reader.read(data, task=_name(path))
            except TrajectoryFileError as e:
                raise TrajectoryFileError(f"{path}: {e}") from None
            except (KeyError, TypeError, AttributeError, ValueError) as e:
                raise TrajectoryFileError(f"{path}: malformed {reader.NAME} file ({type(e).__name__}: {e})") from None
    raise TrajectoryFileError(f"{path}: not a trajectory format this kit reads (tried {', '.join(FORMATS)})")


__all__ = ["FORMATS", "PATTERNS", "TrajectoryFileError", "find_sources", "read_document", "read_source"]
