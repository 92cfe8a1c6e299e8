"""Our own format: one `Trajectory.to_dict()` per line (or one such object as a .json file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mirl.records.trajectory import Trajectory
from mirl.sources.base import TrajectoryFileError

NAME = "our JSONL"


def sniff(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("steps"), list) and "messages" not in data \
        and "schema_version" not in data


def read(data: dict[str, Any], task: str = "") -> Trajectory:
    return Trajectory.from_dict({"task": task, "seed": 0, "models": {}, **data})


def read_text(path: Path, text: str) -> list[Trajectory]:
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise TrajectoryFileError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("steps"), list):
            raise TrajectoryFileError(f"{path}:{lineno}: expected a trajectory object with 'task' and 'steps'")
        try:
            traj = read(obj, task=path.name)
        except (TypeError, AttributeError) as e:
            raise TrajectoryFileError(f"{path}:{lineno}: malformed trajectory ({e})") from None
        traj.meta.setdefault("source_file", str(path))
        traj.meta.setdefault("line", lineno)
        out.append(traj)
    if not out:
        raise TrajectoryFileError(f"{path}: no trajectories in file")
    return out
