"""Misbehavior rate on held-out prefixes: the share of a policy's continuations that repeat the
prefix's misbehavior, per (policy, misbehavior, judge), with intervals that respect that the 16
continuations of one prefix are correlated.

Two measures of uncertainty, both treating the prefix as the unit that was sampled:
- `se`: the cluster-robust standard error with prefixes as clusters (`stderr.cluster_se`);
- `ci_low`/`ci_high`: a percentile bootstrap over prefixes: draw the group's prefixes with
  replacement, pool their samples, recompute the share; B draws, seeded, so reruns agree.
A group needs two prefixes for either (one prefix says nothing about how prefixes differ): with
fewer they are NaN. A judge that failed on a sample (repeated None) leaves it out of the rate and is
counted in `n_failed`, so a judge that fails often is visible rather than silently shrinking n.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from mirl.evaluate.stats.stderr import cluster_se
from mirl.evaluate.stats.tables import samples_frame

GROUP = ["policy", "misbehavior", "judge"]
COLUMNS = [*GROUP, "n_prefixes", "n_samples", "n_failed", "rate", "se", "ci_low", "ci_high"]


def misbehavior_rates(samples: Iterable[Any], n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """One row per (policy, misbehavior, judge): n_prefixes, n_samples, n_failed, rate, se, ci_low, ci_high."""
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot}: the bootstrap needs at least one draw")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level}: a confidence level lies strictly between 0 and 1")
    df = samples_frame(samples)
    rows = []
    for key, group in df.groupby(GROUP, sort=True, dropna=False):
        judged = group[group["repeated"].notna()]
        row = dict(zip(GROUP, key), n_prefixes=judged["prefix_id"].nunique(), n_samples=len(judged),
                   n_failed=len(group) - len(judged))
        if judged.empty:
            rows.append({**row, "rate": math.nan, "se": math.nan, "ci_low": math.nan, "ci_high": math.nan})
            continue
        values = judged["repeated"].astype(float).to_numpy()
        low, high = bootstrap_ci(values, judged["prefix_id"].tolist(), n_boot, seed, level)
        rows.append({**row, "rate": float(values.mean()), "se": cluster_se(values, judged["prefix_id"]),
                     "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows, columns=COLUMNS)


def bootstrap_ci(values: np.ndarray, clusters: list[Any], n_boot: int, seed: int, level: float) -> tuple[float, float]:
    """Percentile interval of the pooled mean when whole clusters are resampled with replacement.

    Seeded per call, so a group's interval does not depend on which other groups were computed.
    """
    means = bootstrap_means(values, clusters, n_boot, seed)
    if means is None:
        return math.nan, math.nan
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(low), float(high)


def bootstrap_means(values: np.ndarray, clusters: list[Any], n_boot: int, seed: int) -> np.ndarray | None:
    """The n_boot pooled shares of draws of as many clusters as there are, with replacement (None for
    fewer than two clusters). Pooled, not a mean of cluster rates: a big prefix weighs as its samples do."""
    codes, _ = pd.factorize(np.asarray(clusters, dtype=object), use_na_sentinel=False)
    sums = np.bincount(codes, weights=values)
    counts = np.bincount(codes).astype(float)
    if len(sums) < 2:
        return None
    draws = np.random.default_rng(seed).integers(0, len(sums), size=(n_boot, len(sums)))
    return sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
