"""How the standard error shrinks with the number of seeds (the paper's Figure 12a), and the spread
of single-seed scores, from a run of the same evaluation under many seeds (16 in the paper).

For each k, every k-subset of the seeds (or, when there are more than `max_subsets`, that many
subsets drawn with a seeded generator) gives:
- `se`: the standard error one would report from those k seeds, sd(ddof=1) / sqrt(k), averaged over
  the subsets; NaN at k = 1, where one seed has no spread to estimate;
- `sd_of_means`: how much the k-seed mean itself moves from subset to subset (sd over subsets,
  ddof=0); it falls faster than 1/sqrt(k) because the subsets share seeds, and is 0 at k = all.
`reference` is the 1/sqrt(k) curve scaled at k = 1 to the SE of a single seed, sd(all seeds) / sqrt(k).

A seed's entry is its score (a number) or its trials, scored as the leaderboard does (mean of task
means, errored trials by the stated rule).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from mirl.evaluate.stats.scores import leaderboard_score


def seed_scores(by_seed: Mapping[Any, Any], errored: str = "zero") -> pd.Series:
    """seed -> score, from numbers as given or from each seed's trials."""
    if not isinstance(by_seed, Mapping) or not by_seed:
        raise ValueError("seeds: expected a non-empty mapping of seed -> score or trials")
    scores = {}
    for seed, entry in by_seed.items():
        if isinstance(entry, numbers.Real):
            if not math.isfinite(entry):
                raise ValueError(f"seed {seed!r}: score {entry!r} is not a finite number")
            scores[seed] = float(entry)
        else:
            try:
                scores[seed] = leaderboard_score(entry, errored).score
            except ValueError as e:
                raise ValueError(f"seed {seed!r}: {e}") from e
    return pd.Series(scores, name="score", dtype=float)


def seed_curve(by_seed: Mapping[Any, Any], k_values: Iterable[int] | None = None, max_subsets: int = 20000,
               seed: int = 0, errored: str = "zero") -> pd.DataFrame:
    """One row per k: k, n_subsets, exhaustive, se, sd_of_means, reference (see the module docstring)."""
    x = seed_scores(by_seed, errored).to_numpy()
    n = len(x)
    ks = list(range(1, n + 1)) if k_values is None else list(k_values)
    if not ks:
        raise ValueError("seed_curve: no k given")
    bad = [k for k in ks if not isinstance(k, numbers.Integral) or not 1 <= k <= n]
    if bad:
        raise ValueError(f"seed_curve: k must be whole numbers from 1 to the {n} seeds, got {bad}")
    if max_subsets < 1:
        raise ValueError(f"max_subsets={max_subsets}: at least one subset is needed")
    sd_all = float(np.std(x, ddof=1)) if n > 1 else math.nan
    rng = np.random.default_rng(seed)
    rows = []
    for k in ks:
        idx, exhaustive = k_subsets(n, k, max_subsets, rng)
        sub = x[idx]
        se = float(np.mean(sub.std(axis=1, ddof=1)) / math.sqrt(k)) if k > 1 else math.nan
        rows.append({"k": int(k), "n_subsets": len(idx), "exhaustive": exhaustive, "se": se,
                     "sd_of_means": float(sub.mean(axis=1).std(ddof=0)), "reference": sd_all / math.sqrt(k)})
    return pd.DataFrame(rows, columns=["k", "n_subsets", "exhaustive", "se", "sd_of_means", "reference"])


def k_subsets(n: int, k: int, max_subsets: int, rng: np.random.Generator) -> tuple[np.ndarray, bool]:
    """Rows of k distinct indices out of n: all C(n, k) of them, or `max_subsets` drawn at random when
    there are more (each row a uniform k-subset; rows may repeat). Returns (rows, exhaustive)."""
    if math.comb(n, k) <= max_subsets:
        return np.array(list(combinations(range(n), k)), dtype=int).reshape(-1, k), True
    return np.sort(np.argsort(rng.random((max_subsets, n)), axis=1)[:, :k], axis=1), False


def seed_distribution(by_seed: Mapping[Any, Any], errored: str = "zero") -> dict[str, float]:
    """n, min, q1, median, q3, mean, max of the per-seed scores (quartiles by linear interpolation)."""
    x = seed_scores(by_seed, errored).to_numpy()
    q1, median, q3 = np.quantile(x, [0.25, 0.5, 0.75])
    return {"n": len(x), "min": float(x.min()), "q1": float(q1), "median": float(median), "q3": float(q3),
            "mean": float(x.mean()), "max": float(x.max())}
