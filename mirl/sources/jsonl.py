"""Our own format: one `Trajectory.to_dict()` per line (or one such object as a .json file)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from mirl.records.trajectory import Trajectory
from mirl.sources.base import TrajectoryFileError

NAME = "our JSONL"

log = logging.getLogger(__name__)


def sniff(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("steps"), list) and "messages" not in data \
        and "schema_version" not in data


def read(data: dict[str, Any], task: str = "") -> Trajectory:
    return Trajectory.from_dict({"task": task, "seed": 0, "models": {}, **data})


def read_text(path: Path, text: str) -> list[Trajectory]:
    """Every trajectory of a JSONL text; a torn last line (no newline after it, not JSON: a run killed,
    or still writing, mid-record) is skipped with a warning, as `mirl.jsonl` reads a run's own files."""
    out = []
    lines = text.splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            if lineno == len(lines) and not text.endswith(("\n", "\r")):
                log.warning("%s:%d: skipped a torn last line (%d characters, an interrupted write)", path, lineno,
                            len(line))
                break
            raise TrajectoryFileError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("steps"), list):
            raise TrajectoryFileError(f"{path}:{lineno}: expected a trajectory object with 'task' and 'steps'")
        try:
            traj = read(obj, task=path.name)
        except (TypeError, AttributeError, ValueError) as e:
            raise TrajectoryFileError(f"{path}:{lineno}: malformed trajectory ({e})") from None
        traj.meta.setdefault("source_file", str(path))
        traj.meta.setdefault("line", lineno)
        out.append(traj)
    if not out:
        raise TrajectoryFileError(f"{path}: no trajectories in file")
    return out
