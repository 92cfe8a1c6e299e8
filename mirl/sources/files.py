"""One trajectory file of any known format (ours, mini-swe-agent, ATIF): what the trial readers
(`harbor`, `tb1`) and `read_source` share, below all of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mirl.records.trajectory import Trajectory
from mirl.sources import atif, jsonl, miniswe
from mirl.sources.base import FORMATS, TrajectoryFileError

# file names a directory search picks up (trial directories are recognised by their result files)
PATTERNS = ("*.traj.json", "*.traj", "*.jsonl", "trajectory.json", "*.trajectory.json", "*.atif.json")


def read_file(path: Path) -> list[Trajectory]:
    """The trajectories of one file: a JSONL file holds many, a JSON document one."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise TrajectoryFileError(f"{path}: cannot read: {e.strerror or e}") from None
    if not text.strip():
        raise TrajectoryFileError(f"{path}: file is empty")
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
    for reader in (atif, miniswe, jsonl):
        if reader.sniff(data):
            try:
                traj = reader.read(data, task=_name(path))
                if reader is atif:
                    atif.read_continuations(path, data, traj)
                return traj
            except TrajectoryFileError as e:
                raise TrajectoryFileError(f"{path}: {e}") from None
            except ValueError as e:  # the record's problem, said by the reader
                raise TrajectoryFileError(f"{path}: malformed {reader.NAME} file: {e}") from None
            except (KeyError, TypeError, AttributeError) as e:
                raise TrajectoryFileError(f"{path}: malformed {reader.NAME} file ({type(e).__name__}: {e})") from None
    raise TrajectoryFileError(f"{path}: not a trajectory format this kit reads (tried {', '.join(FORMATS)})")

