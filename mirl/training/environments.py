"""The environments a recipe trains on: all of them, or a seeded draw of N (`mirl.tasks.draw`).

The paper's TMax-189, PivotRL and RaR+ train on "189 environments sampled at random from the same
2,017" that were profiled, and MiRL's 0.25x and 0.5x runs on subsets of its 189 where "the smaller
subset is part of the larger one"; the draw gives both (same pool and seed, same list; a smaller N a
prefix of a larger one). The training stage writes what it drew to `training/environments.json`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mirl.runner.layout import atomic_write_json
from mirl.tasks.draw import draw

__all__ = ["FILE", "draw", "pool", "record"]
FILE = "environments.json"


def pool(task_ids: Sequence[str], profiled: Sequence[str], explicit: bool) -> tuple[list[str], str]:
    """(ids, what they are) to draw from: the given task pool when `explicit` (training.tasks), else the
    environments profiling played that are in the pool (the paper draws from "the same 2,017")."""
    if explicit:
        return sorted(set(task_ids)), "the task pool of training.tasks"
    ids = set(task_ids)
    return sorted({e for e in profiled if e in ids}), "the profiled environments"


def record(directory: Path, pool: Sequence[str], n: int, seed: int, source: str) -> dict[str, Any]:
    """Write the draw (`FILE`) and return it: where from, the pool's size, N, the seed and the drawn ids."""
    drawn = draw(pool, n, seed)
    out = {"from": source, "pool": len(set(pool)), "asked": n, "seed": seed, "drawn": len(drawn),
           "environments": drawn}
    atomic_write_json(Path(directory) / FILE, out)
    return out
