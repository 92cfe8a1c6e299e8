"""mini-swe-agent `.traj.json` (1.x, 2.x, text or tool calls) and bare chat message lists.

The parsing itself lives in `mirl.agent.miniswe`, which also writes the format back; this module
only says which documents it takes.
"""

from __future__ import annotations

from typing import Any

from mirl.agent.miniswe import TrajFormatError, from_traj_json
from mirl.records.trajectory import Trajectory
from mirl.sources.base import TrajectoryFileError

NAME = "mini-swe-agent .traj.json"


def sniff(data: Any) -> bool:
    if isinstance(data, dict):
        return isinstance(data.get("messages"), list)
    return isinstance(data, list) and bool(data) and all(isinstance(m, dict) and "role" in m for m in data)


def read(data: Any, task: str = "") -> Trajectory:
    try:
        return from_traj_json(data, task=task)
    except TrajFormatError as e:
        raise TrajectoryFileError(str(e)) from None
