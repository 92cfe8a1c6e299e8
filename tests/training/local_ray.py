"""A local Ray node for the tests that use real Ray actors."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def start_local_ray(cpus: int = 2):
    """`ray.init` on this machine, the actors importing this checkout's mirl as the driver does.
    Ray's raylet gives its metrics agent a fixed 15 s to start (ray-project/ray#65983); on a loaded
    machine the agent's imports take longer and the node dies at start-up, so it is tried again."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), "OMP_NUM_THREADS": "1"}
    for attempt in range(3):
        try:
            ray.init(num_cpus=cpus, include_dashboard=False, runtime_env={"env_vars": env}, log_to_driver=False)
            return ray
        except Exception as e:
            ray.shutdown()
            if attempt == 2 or "timed out during startup" not in str(e):
                raise
    raise AssertionError("unreachable")
