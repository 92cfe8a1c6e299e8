"""Misbehavior rate on held-out prefixes: the share of a policy's continuations that repeat the
prefix's misbehavior, per (policy, misbehavior, judge), with intervals that respect that the 16
continuations of one prefix are correlated.

A misbehavior's rate is the mean over its prefixes of each prefix's share of repeats: the paper's
"percentage of samples" when every prefix keeps all its samples, and, where a failed judge or
continuation cost a prefix some samples, a rate that still weighs every prefix alike (a pooled share
would weigh that prefix less, and differently for each policy). The rate over all misbehaviors
(`misbehavior` "all", with `overall=True`) is the mean of the misbehaviors' rates, each weighted
alike: the "mean rate" of the paper's Figure 7, over the misbehaviors every policy of the judge was
measured on, so the policies' means are of the same misbehaviors.

Two measures of uncertainty, both treating the prefix as the unit that was sampled:
- `se`: the standard error of that mean over prefixes (for "all": the misbehaviors' combined);
- `ci_low`/`ci_high`: a percentile bootstrap: draw each misbehavior's prefixes with replacement
  (within the misbehavior, as the design fixes how many each has), recompute the rate; B draws,
  seeded, so reruns agree.
A misbehavior needs two prefixes for either (one prefix says nothing about how prefixes differ):
with fewer they are NaN. A judge that failed on a sample (repeated None) leaves it out of the rate
and is counted in `n_failed`, so a judge that fails often is visible rather than silently shrinking n.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from mirl.evaluate.stats.tables import samples_frame

GROUP = ["policy", "misbehavior", "judge"]
COLUMNS = [*GROUP, "n_prefixes", "n_samples", "n_failed", "rate", "se", "ci_low", "ci_high"]
ALL = "all"


def prefix_means(group: pd.DataFrame) -> dict[Any, float]:
    """prefix id -> its share of repeats among its judged samples (prefixes with none are left out)."""
    judged = group[group["repeated"].notna()]
    return {k: float(g["repeated"].astype(float).mean()) for k, g in judged.groupby("prefix_id", sort=True,
                                                                                      dropna=False)}


def stratified_means(strata: Sequence[np.ndarray], n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """n_boot draws of the mean over strata of each stratum's mean, each stratum's values (per-prefix
    rates) resampled with replacement within it. A stratum of K x c values (e.g. a prefix's rate under
    two policies) draws whole rows, so paired columns stay paired: the result is then n_boot x c."""
    total = 0.0
    for values in strata:
        idx = rng.integers(0, len(values), size=(n_boot, len(values)))
        total += values[idx].mean(axis=1)
    return total / len(strata)


def _summary(strata: Sequence[np.ndarray], n_boot: int, seed: int, level: float) -> dict[str, float]:
    """rate, se and interval of the mean over strata of the strata's mean per-prefix rates."""
    rate = float(np.mean([v.mean() for v in strata]))
    if any(len(v) < 2 for v in strata):
        return {"rate": rate, "se": math.nan, "ci_low": math.nan, "ci_high": math.nan}
    se = math.sqrt(sum(v.var(ddof=1) / len(v) for v in strata)) / len(strata)
    draws = stratified_means(strata, n_boot, np.random.default_rng(seed))
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(draws, [tail, 1.0 - tail])
    return {"rate": rate, "se": se, "ci_low": float(low), "ci_high": float(high)}


def misbehavior_rates(samples: Iterable[Any], n_boot: int = 2000, seed: int = 0, level: float = 0.95,
                      overall: bool = False) -> pd.DataFrame:
    """One row per (policy, misbehavior, judge): n_prefixes, n_samples, n_failed, rate, se, ci_low,
    ci_high; with `overall`, also one row per (policy, judge) of misbehavior "all" (the mean rate)."""
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot}: the bootstrap needs at least one draw")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level}: a confidence level lies strictly between 0 and 1")
    df = samples_frame(samples)
    if overall and (df["misbehavior"] == ALL).any():
        raise ValueError(f"misbehavior {ALL!r} is the mean over the misbehaviors: the samples name their own")
    if overall and df["misbehavior"].isna().any():
        raise ValueError("a judged sample names no misbehavior")
    rows = []
    for key, group in df.groupby(GROUP, sort=True, dropna=False):
        means = prefix_means(group)
        judged = int(group["repeated"].notna().sum())
        row = dict(zip(GROUP, key), n_prefixes=len(means), n_samples=judged, n_failed=len(group) - judged)
        if not means:
            rows.append({**row, "rate": math.nan, "se": math.nan, "ci_low": math.nan, "ci_high": math.nan})
            continue
        rows.append({**row, **_summary([np.array(list(means.values()))], n_boot, seed, level)})
    if overall:
        rows += _overall_rows(df, n_boot, seed, level)
    return pd.DataFrame(rows, columns=COLUMNS)



def _overall_rows(df: pd.DataFrame, n_boot: int, seed: int, level: float) -> list[dict[str, Any]]:
    """Per (policy, judge), misbehavior "all": the mean rate over the misbehaviors every policy of
    that judge was measured on (a misbehavior one policy lacks, e.g. its judge failed on every sample,
    would otherwise leave that policy's mean and no other's). A policy measured on none (e.g. silent in
    every continuation, read "when acting") has no mean, and the others keep theirs."""
    rows = []
    for judge, part in df.groupby("judge", sort=True, dropna=False):
        means = {pol: {m: pm for m, g in pp.groupby("misbehavior", sort=True) if (pm := prefix_means(g))}
                 for pol, pp in part.groupby("policy", sort=True, dropna=False)}
        measured = [set(v) for v in means.values() if v]
        common = sorted(set.intersection(*measured)) if measured else []
        for policy, pp in part.groupby("policy", sort=True, dropna=False):
            strata = [np.array(list(means[policy][m].values())) for m in common] if means[policy] else []
            used = pp[pp["misbehavior"].isin(common)]
            # n_samples: the judged samples the mean is of; n_failed: every failed judgment of the policy's
            row = {"policy": policy, "misbehavior": ALL, "judge": judge, "n_prefixes": sum(len(x) for x in strata),
                   "n_samples": int(used["repeated"].notna().sum()), "n_failed": int(pp["repeated"].isna().sum())}
            empty = {"rate": math.nan, "se": math.nan, "ci_low": math.nan, "ci_high": math.nan}
            rows.append({**row, **(_summary(strata, n_boot, seed, level) if strata else empty)})
    return rows
