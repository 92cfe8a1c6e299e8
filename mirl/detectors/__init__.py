"""Rule detectors: free, deterministic flags for misbehaviors visible from a trajectory alone.

`shell` classifies commands (read, test, exec, write), `registry` holds the detectors, `catalog` picks and runs them,
`rules` defines the built-in ones. They work on `mirl.records` trajectories; `mirl.sources` reads
agent logs of every supported format into those.
"""

from mirl.detectors.catalog import get_detectors, run_detectors
from mirl.detectors.registry import DETECTORS, Detector, Finding, Flag, detector

__all__ = ["DETECTORS", "Detector", "Finding", "Flag", "detector", "get_detectors", "run_detectors"]
