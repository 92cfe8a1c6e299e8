"""How large a drop in the misbehavior rate an evaluation can tell from noise, and the drop it measured.

The design (as the misbehavior-rate stage runs it): every policy continues the same K held-out
prefixes n times each, and a prefix is the unit that was sampled (its n continuations are
correlated). Policies are compared on the same prefixes, so the comparison is paired by prefix:
the difference of two pooled rates is the mean over prefixes of each prefix's difference, whose
variance is the spread of those differences between prefixes over K.

- `reduction_interval`: the relative reduction 1 - rate(policy) / rate(base) with a paired
  percentile bootstrap over the prefixes both policies were measured on; `reduction_table` gives it
  for every policy against a reference one, per (judge, misbehavior).
- `detectable_reduction`: the smallest relative reduction r that this design detects (the
  interval excludes 0) with probability `power` at level `alpha`, for per-prefix base rates taken
  from an earlier run (or a stated prior), assuming the treated rate of prefix k is (1 - r) p_k:
  r p = (z_{1-alpha/2} + z_power) sqrt((r^2 var(p) + mean[p(1-p) + q(1-q)] / n) / K), solved for r.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist

import numpy as np


def _paired(base: Mapping[str, Sequence[float]], policy: Mapping[str, Sequence[float]]):
    keys = sorted(set(base) & set(policy))
    if len(keys) < 2:
        raise ValueError(f"a paired comparison needs at least two prefixes measured under both policies, got {len(keys)}")
    b = [np.asarray(base[k], dtype=float) for k in keys]
    p = [np.asarray(policy[k], dtype=float) for k in keys]
    return keys, b, p


def reduction_interval(base: Mapping[str, Sequence[float]], policy: Mapping[str, Sequence[float]],
                       n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """`base` and `policy`: prefix id -> the 0/1 judgments (repeated or not) of its continuations.
    The reduction of the pooled rate, and its interval from resampling the shared prefixes."""
    keys, b, p = _paired(base, policy)
    b_sum, b_n = np.array([x.sum() for x in b]), np.array([len(x) for x in b], dtype=float)
    p_sum, p_n = np.array([x.sum() for x in p]), np.array([len(x) for x in p], dtype=float)

    def reduction(idx) -> np.ndarray:
        rb = b_sum[idx].sum(-1) / b_n[idx].sum(-1)
        rp = p_sum[idx].sum(-1) / p_n[idx].sum(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return 1.0 - rp / rb

    point = float(reduction(np.arange(len(keys))))
    rng = np.random.default_rng(seed)
    draws = reduction(rng.integers(0, len(keys), size=(n_boot, len(keys))))
    draws = draws[np.isfinite(draws)]
    tail = (1 - level) / 2
    low, high = (np.quantile(draws, [tail, 1 - tail]) if len(draws) else (math.nan, math.nan))
    return {"reduction": point, "ci_low": float(low), "ci_high": float(high), "prefixes": len(keys),
            "base_rate": float(b_sum.sum() / b_n.sum()), "rate": float(p_sum.sum() / p_n.sum())}


REDUCTION_COLUMNS = ["judge", "misbehavior", "reference", "policy", "prefixes", "base_rate", "rate", "reduction",
                     "ci_low", "ci_high"]


def reduction_table(samples, reference: str, n_boot: int = 2000, seed: int = 0, level: float = 0.95):
    """Judged samples (policy, misbehavior, prefix_id, judge, repeated; misbehavior "all" pools them, as
    the rates do) -> one row per (judge, misbehavior, policy other than `reference`): the reduction of
    its rate against the reference's on their shared prefixes, with the paired bootstrap interval.
    Fewer than two shared prefixes, or a reference rate of 0, give NaN; failed judgments are left out."""
    import pandas as pd

    from mirl.evaluate.stats.tables import samples_frame

    samples = list(samples)
    if not samples:
        return pd.DataFrame(columns=REDUCTION_COLUMNS)
    df = samples_frame(samples)
    df = df[df["repeated"].notna()]
    rows = []
    for (judge, misbehavior), group in df.groupby(["judge", "misbehavior"], sort=True):
        by_policy = {pol: {str(k): g["repeated"].astype(float).tolist() for k, g in part.groupby("prefix_id")}
                     for pol, part in group.groupby("policy", sort=False)}
        if reference not in by_policy:
            continue
        for policy, measured in by_policy.items():
            if policy == reference:
                continue
            row = {"judge": judge, "misbehavior": misbehavior, "reference": reference, "policy": policy}
            try:
                row.update(reduction_interval(by_policy[reference], measured, n_boot, seed, level))
            except ValueError:  # fewer than two shared prefixes
                row.update(prefixes=len(set(measured) & set(by_policy[reference])), base_rate=math.nan,
                           rate=math.nan, reduction=math.nan, ci_low=math.nan, ci_high=math.nan)
            if not row["base_rate"] > 0:  # the reference never repeats it: no share of nothing to reduce
                row.update(reduction=math.nan, ci_low=math.nan, ci_high=math.nan)
            rows.append(row)
    return pd.DataFrame(rows, columns=REDUCTION_COLUMNS)


def detectable_reduction(base_rates: Sequence[float], samples: int, prefixes: int | None = None,
                         alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest relative reduction detected with probability `power` (module docstring);
    `base_rates`: per-prefix rates of the base policy; `prefixes`: K (default: as many as given).
    1.0 or more means no reduction short of removing the misbehavior is detectable: returns inf."""
    p = np.asarray(base_rates, dtype=float)
    if p.size < 2 or samples < 1:
        raise ValueError("the design needs at least two prefixes' base rates and at least one sample a prefix")
    k = p.size if prefixes is None else int(prefixes)
    if k < 1:
        return math.inf
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    mean, spread = float(p.mean()), float(p.var())
    if mean <= 0:
        return math.inf

    def margin(r: float) -> float:  # > 0: r is detected with the wanted power
        q = (1 - r) * p
        noise = float(np.mean(p * (1 - p) + q * (1 - q))) / samples
        return r * mean - z * math.sqrt((r * r * spread + noise) / k)

    if margin(1.0) <= 0:
        return math.inf
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if margin(mid) > 0 else (mid, hi)
    return hi


def design_line(base_rates: Sequence[float], samples: int, prefixes: int | None = None, target: float = 0.4) -> str:
    """One line for a plan's --check: what the design detects, against the reduction it is meant to see."""
    r = detectable_reduction(base_rates, samples, prefixes)
    k = len(base_rates) if prefixes is None else int(prefixes)
    verdict = "detectable" if r <= target else "NOT detectable"
    shown = "none short of 100%" if math.isinf(r) else f"{r:.0%}"
    return (f"{k} held-out prefixes x {samples} samples, base rate {float(np.mean(base_rates)):.2f}: smallest relative "
            f"reduction detected at 95% with power 0.8: {shown}; {target:.0%} is {verdict}")
