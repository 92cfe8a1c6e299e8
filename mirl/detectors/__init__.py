"""Rule detectors: free, deterministic flags for misbehaviors visible from a trajectory alone.

`shell` classifies commands (read, test, exec, write), `sources` reads trajectory files of any
supported format, `registry` holds the detectors and runs them, `rules` defines the built-in ones.
"""

from mirl.detectors.registry import DETECTORS, Detector, Finding, Flag, detector, get_detectors, run_detectors
from mirl.detectors.sources import TrajectoryFileError, find_files, read_trajectories

__all__ = ["DETECTORS", "Detector", "Finding", "Flag", "TrajectoryFileError", "detector", "find_files",
           "get_detectors", "read_trajectories", "run_detectors"]
