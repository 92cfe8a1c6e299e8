"""A seeded draw of N task (environment) ids from a pool: the paper's "2,017 random environments from
TMax's set" and its baselines' "189 environments sampled at random from the same 2,017".

One seeded shuffle of the distinct, sorted pool, of which the first N are taken: the same pool and
seed give the same list to every caller, and a smaller N is a prefix of a larger one (the paper's
0.25x and 0.5x subsets are "part of the larger one").
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

log = logging.getLogger(__name__)


def draw(pool: Sequence[str], n: int, seed: int = 0) -> list[str]:
    """The first `n` of a seeded shuffle of the distinct, sorted `pool` (all of it, shuffled, for n = 0
    or, with a warning, for n above its size), in drawn order."""
    if n < 0:
        raise ValueError(f"the number of environments to draw must be 0 (all) or more, got {n}")
    order = sorted(set(pool))
    random.Random(f"{seed}:environments").shuffle(order)
    if n and n > len(order):
        log.warning("asked to draw %d environments from a pool of %d: all of them are used", n, len(order))
    return order[:n] if n else order
