"""Trajectory files for the detectors: the readers live in `mirl.sources` (one module per format).

Kept as the detectors' entry point: `find_files` and `read_trajectories` are `find_sources` and
`read_source`.
"""

from __future__ import annotations

from mirl.sources import PATTERNS, TrajectoryFileError, find_sources, read_source

find_files = find_sources
read_trajectories = read_source

__all__ = ["PATTERNS", "TrajectoryFileError", "find_files", "read_trajectories"]
