"""Read trajectory files into `Trajectory` records, whatever agent wrote them.

Accepted: our JSONL (one `Trajectory.to_dict()` per line, or one such object as .json), and
everything `mirl.agent.miniswe` reads: mini-swe-agent `.traj.json` (1.x and 2.x, text or tool-call
mode, and our own exports) and a bare list of OpenAI-style chat messages. That module is the one
reader of mini-swe-agent files, so `mirl detect` and `mirl rollout import` see the same steps.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mirl.agent.miniswe import TrajFormatError, from_traj_json
from mirl.agent.trajectory import Trajectory

PATTERNS = ("*.traj.json", "*.jsonl")


class TrajectoryFileError(ValueError):
    """A file could not be read as trajectories; the message names the file and what is wrong."""


def find_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files named on the command line, with directories searched recursively for trajectory files."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = {f for pattern in PATTERNS for f in p.rglob(pattern) if f.is_file()}
            out.extend(sorted(found))
        else:
            out.append(p)
    return out


def read_trajectories(path: str | Path) -> list[Trajectory]:
    """All trajectories in one file; raises `TrajectoryFileError` with the file name on any problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise TrajectoryFileError(f"{path}: cannot read: {e.strerror or e}") from None
    if not text.strip():
        raise TrajectoryFileError(f"{path}: file is empty")
    if path.name.endswith(".jsonl"):
        return _read_jsonl(path, text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        if "\n" in text.strip():  # perhaps JSONL under another name
            return _read_jsonl(path, text)
        raise TrajectoryFileError(f"{path}: not valid JSON") from None
    try:
        traj = _from_json(path, data)
    except TrajFormatError as e:
        raise TrajectoryFileError(f"{path}: {e}") from None
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise TrajectoryFileError(f"{path}: not a trajectory this reader knows ({type(e).__name__}: {e})") from None
    traj.meta.setdefault("source_file", str(path))
    return [traj]


def _read_jsonl(path: Path, text: str) -> list[Trajectory]:
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise TrajectoryFileError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict) or "steps" not in obj or not isinstance(obj.get("steps"), list):
            raise TrajectoryFileError(f"{path}:{lineno}: expected a trajectory object with 'task' and 'steps'")
        try:
            traj = Trajectory.from_dict({"task": path.name, "seed": 0, "models": {}, **obj})
        except (TypeError, AttributeError) as e:
            raise TrajectoryFileError(f"{path}:{lineno}: malformed trajectory ({e})") from None
        traj.meta.setdefault("source_file", str(path))
        traj.meta.setdefault("line", lineno)
        out.append(traj)
    if not out:
        raise TrajectoryFileError(f"{path}: no trajectories in file")
    return out


def _from_json(path: Path, data: Any) -> Trajectory:
    if isinstance(data, dict) and isinstance(data.get("steps"), list) and "messages" not in data:
        return Trajectory.from_dict({"task": path.name, "seed": 0, "models": {}, **data})
    if isinstance(data, dict) and isinstance(data.get("messages"), list) or \
            isinstance(data, list) and data and all(isinstance(m, dict) and "role" in m for m in data):
        return from_traj_json(data, task=path.name.removesuffix(".traj.json").removesuffix(".json"))
    raise TrajectoryFileError(
        f"{path}: not a trajectory: expected our JSONL, a mini-swe-agent .traj.json (with 'messages') or a list of chat messages"
    )
