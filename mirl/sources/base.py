"""What every trajectory reader shares: the error it raises and the list of formats it is one of."""

from __future__ import annotations

FORMATS = ("our JSONL", "mini-swe-agent .traj.json", "chat message list", "ATIF v1.0-v1.8",
           "Harbor trial directory", "Terminal-Bench 1 trial directory")


class TrajectoryFileError(ValueError):
    """A file could not be read as trajectories; the message names the file and what is wrong."""
