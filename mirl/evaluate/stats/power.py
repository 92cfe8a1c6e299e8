"""How large a drop in the misbehavior rate an evaluation can tell from noise, and the drop it measured.

The design (as the misbehavior-rate stage runs it): every policy continues the same K held-out
prefixes n times each, and a prefix is the unit that was sampled (its n continuations are
correlated). Policies are compared on the same prefixes, so the comparison is paired by prefix:
a rate is the mean over prefixes of each prefix's share of repeats (`mirl.evaluate.stats.rates`),
and the difference of two rates is the mean over prefixes of each prefix's difference, whose
variance is the spread of those differences between prefixes over K.

- `stratified_reduction` (`reduction_interval` for one misbehavior): the relative reduction
  1 - rate(policy) / rate(base) with a paired percentile bootstrap over the prefixes both policies
  were measured on, drawn within each misbehavior; `reduction_table` gives it for every policy
  against a reference one, per (judge, misbehavior) and for the mean rate over misbehaviors ("all").
  Percentile intervals run a little narrow at this design's sizes: in simulations of 20 prefixes x 16
  samples a per-misbehavior 95% interval covered the true reduction 91-93% of the time (a BCa
  interval did not do much better); read an interval whose end is near 0 as borderline.
- `stratified_difference` (`difference_table` for every pair of policies after the reference): how
  much larger one trained policy's reduction is than another's against the same base, (rate(other) -
  rate(policy)) / rate(base), with the same paired bootstrap over the prefixes all three were measured
  on: whether MiRL beats outcome-only RL is this interval, not two overlapping ones.
- `detectable_reduction`: the smallest relative reduction r that this design detects (the
  interval excludes 0) with probability `power` at level `alpha`, for per-prefix base rates taken
  from an earlier run (or a stated prior), assuming the treated rate of prefix k is (1 - r) p_k:
  r p = (z_{1-alpha/2} + z_power) sqrt((r^2 var(p) + mean[p(1-p) + q(1-q)] / n) / K), solved for r.
  `stratified_detectable` does the same for the mean rate over misbehaviors, as the analysis measures
  it: p is the mean of the misbehaviors' mean rates, and the variance the sum of each misbehavior's
  term above over its own K_m, divided by M^2 (a misbehavior with few prefixes weighs as much as one
  with many, so it adds more noise).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist

import numpy as np

from mirl.evaluate.stats.rates import stratified_means


def _paired(base: Mapping[str, Sequence[float]], policy: Mapping[str, Sequence[float]]):
    keys = sorted(set(base) & set(policy), key=repr)  # ids as given: 1 and "1" are two prefixes
    b = np.array([np.mean(np.asarray(base[k], dtype=float)) for k in keys])
    p = np.array([np.mean(np.asarray(policy[k], dtype=float)) for k in keys])
    nb = sum(len(base[k]) for k in keys)
    n_p = sum(len(policy[k]) for k in keys)
    return keys, b, p, nb, n_p


def reduction_interval(base: Mapping[str, Sequence[float]], policy: Mapping[str, Sequence[float]],
                       n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """`base` and `policy`: prefix id -> the 0/1 judgments (repeated or not) of its continuations.
    The reduction of the rate (the mean per-prefix share), and its interval from resampling the
    shared prefixes: `stratified_reduction` with one misbehavior."""
    return stratified_reduction({"": base}, {"": policy}, n_boot, seed, level)


def stratified_reduction(base: Mapping[str, Mapping[str, Sequence[float]]],
                         policy: Mapping[str, Mapping[str, Sequence[float]]],
                         n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """misbehavior -> prefix id -> 0/1 judgments, for the base and a trained policy. The relative
    reduction 1 - rate(policy) / rate(base) of the mean rate over the misbehaviors both were measured
    on (each misbehavior's rate the mean of its shared prefixes' shares), with a paired percentile
    bootstrap: each misbehavior's shared prefixes drawn with replacement, the same draw for both
    policies. A draw whose base rate is 0 counts (as -inf where the policy repeated anything there, as
    0 where neither did): dropping it would drop the draws least kind to the trained policy.
    `boot_base_zero` is the share of such draws. A misbehavior with a single shared prefix leaves the
    interval NaN (as its own rate's is): that prefix would be drawn alike every time."""
    strata, nb, n_p = [], 0, 0
    for m in sorted(set(base) & set(policy)):
        keys, b, p, sb, sp = _paired(base[m], policy[m])
        if keys:
            strata.append((b, p))
            nb, n_p = nb + sb, n_p + sp
    k = sum(len(b) for b, _ in strata)
    if k < 2:
        raise ValueError(f"a paired comparison needs at least two prefixes measured under both policies, got {k}")
    rb = float(np.mean([b.mean() for b, _ in strata]))
    rp = float(np.mean([p.mean() for _, p in strata]))
    point = {"reduction": 1.0 - rp / rb if rb > 0 else math.nan, "prefixes": k, "base_rate": rb, "rate": rp,
             "samples_base": nb, "samples": n_p}
    if any(len(b) < 2 for b, _ in strata):  # a lone prefix, drawn the same every time, would narrow it: no interval
        return {**point, "ci_low": math.nan, "ci_high": math.nan, "boot_base_zero": math.nan}
    paired = stratified_means([np.column_stack([b, p]) for b, p in strata], n_boot, np.random.default_rng(seed))
    db, dp = paired[:, 0], paired[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        draws = np.where(db > 0, 1.0 - dp / db, np.where(dp > 0, -np.inf, 0.0))
    tail = (1 - level) / 2
    low, high = np.quantile(draws, [tail, 1 - tail], method="inverted_cdf")
    return {**point, "ci_low": float(low), "ci_high": float(high), "boot_base_zero": float(np.mean(db <= 0))}


def stratified_difference(base: Mapping[str, Mapping[str, Sequence[float]]],
                          policy: Mapping[str, Mapping[str, Sequence[float]]],
                          other: Mapping[str, Mapping[str, Sequence[float]]],
                          n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """misbehavior -> prefix id -> 0/1 judgments, for the base and two trained policies. The difference of
    their relative reductions of the mean rate, reduction(policy) - reduction(other) = (rate(other) -
    rate(policy)) / rate(base), on the prefixes all three were measured on, with a paired percentile
    bootstrap (each misbehavior's prefixes drawn with replacement, the same draw for the three). A draw
    whose base rate is 0 counts as +-inf by the sign of rate(other) - rate(policy) (0 where they agree).
    Positive: `policy` reduced the misbehaviors more."""
    strata, k = [], 0
    for m in sorted(set(base) & set(policy) & set(other)):
        keys = sorted(set(base[m]) & set(policy[m]) & set(other[m]), key=repr)
        if keys:
            strata.append(np.array([[np.mean(np.asarray(x[m][key], dtype=float)) for x in (base, policy, other)]
                                    for key in keys]))
            k += len(keys)
    if k < 2:
        raise ValueError(f"a paired comparison needs at least two prefixes measured under all three policies, got {k}")
    rb, rp, ro = (float(np.mean([v[:, c].mean() for v in strata])) for c in range(3))
    point = {"prefixes": k, "base_rate": rb, "rate": rp, "other_rate": ro,
             "reduction": 1.0 - rp / rb if rb > 0 else math.nan,
             "other_reduction": 1.0 - ro / rb if rb > 0 else math.nan,
             "difference": (ro - rp) / rb if rb > 0 else math.nan}
    if any(len(v) < 2 for v in strata):
        return {**point, "ci_low": math.nan, "ci_high": math.nan}
    draws = stratified_means(strata, n_boot, np.random.default_rng(seed))
    db, gap = draws[:, 0], draws[:, 2] - draws[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = np.where(db > 0, gap / db, np.sign(gap) * np.inf)
    diff = np.nan_to_num(diff, nan=0.0, posinf=np.inf, neginf=-np.inf)  # 0 * inf where they agree on 0
    tail = (1 - level) / 2
    low, high = np.quantile(diff, [tail, 1 - tail], method="inverted_cdf")
    return {**point, "ci_low": float(low), "ci_high": float(high)}


REDUCTION_COLUMNS = ["judge", "misbehavior", "reference", "policy", "prefixes", "samples_base", "samples", "base_rate",
                     "rate", "reduction", "ci_low", "ci_high", "boot_base_zero"]


def reduction_table(samples, reference: str, n_boot: int = 2000, seed: int = 0, level: float = 0.95):
    """Judged samples (policy, misbehavior, prefix_id, judge, repeated) -> one row per (judge, misbehavior,
    policy other than `reference`), and per (judge, policy) one of misbehavior "all" (the mean rate over
    the misbehaviors both were measured on, `stratified_reduction`): the reduction of its rate against
    the reference's on their shared prefixes, with the paired bootstrap interval. Fewer than two shared
    prefixes, or a reference rate of 0, give NaN; failed judgments are left out."""
    import pandas as pd

    from mirl.evaluate.stats.rates import ALL
    from mirl.evaluate.stats.tables import samples_frame

    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot}: the bootstrap needs at least one draw")
    samples = list(samples)
    if not samples:
        return pd.DataFrame(columns=REDUCTION_COLUMNS)
    df = samples_frame(samples)
    if df["misbehavior"].isna().any():
        raise ValueError("a judged sample names no misbehavior")
    if (df["misbehavior"] == ALL).any():
        raise ValueError(f"misbehavior {ALL!r} is the mean over the misbehaviors: the samples name their own")
    df = df[df["repeated"].notna()]
    rows = []

    def compare(judge, misbehavior, ref, policy, measured, strata_of):
        row = {"judge": judge, "misbehavior": misbehavior, "reference": reference, "policy": policy}
        r, q = strata_of(ref), strata_of(measured)
        try:
            row.update(stratified_reduction(r, q, n_boot, seed, level))
        except ValueError:  # fewer than two shared prefixes
            shared = sum(len(set(r.get(m, {})) & set(q[m])) for m in q)
            row.update(prefixes=shared, base_rate=math.nan, rate=math.nan, reduction=math.nan, ci_low=math.nan,
                       ci_high=math.nan)
        if not row["base_rate"] > 0:  # the reference never repeats it: no share of nothing to reduce
            row.update(reduction=math.nan, ci_low=math.nan, ci_high=math.nan)
        rows.append(row)

    for judge, by_policy in _judged(df):
        part = df[df["judge"] == judge]
        if reference not in by_policy:
            continue
        ref = by_policy[reference]
        for m in sorted(set(part["misbehavior"])):
            for policy, measured in by_policy.items():
                if policy != reference and m in measured:
                    compare(judge, m, ref.get(m, {}), policy, measured[m], lambda x: {"": x})
        for policy, measured in by_policy.items():
            if policy != reference:
                compare(judge, ALL, ref, policy, measured, lambda x: x)
    return pd.DataFrame(rows, columns=REDUCTION_COLUMNS)


def _judged(df):
    """(judge, policy -> misbehavior -> prefix id -> 0/1 judgments) for each judge of a samples frame
    (`tables.samples_frame`), policies in the order the samples give them; failed judgments left out."""
    df = df[df["repeated"].notna()]
    for judge, part in df.groupby("judge", sort=True):
        yield judge, {pol: {m: {k: g["repeated"].astype(float).tolist()
                                for k, g in mp.groupby("prefix_id", sort=True, dropna=False)}
                            for m, mp in pp.groupby("misbehavior", sort=True, dropna=False)}
                      for pol, pp in part.groupby("policy", sort=False)}


DIFFERENCE_COLUMNS = ["judge", "misbehavior", "reference", "policy", "other", "prefixes", "base_rate", "rate",
                      "other_rate", "reduction", "other_reduction", "difference", "ci_low", "ci_high"]


def difference_table(samples, reference: str, n_boot: int = 2000, seed: int = 0, level: float = 0.95):
    """Judged samples -> for every pair of policies other than `reference` (each with every later one, in
    the samples' order), per judge, one row per misbehavior all three were measured on and one of
    misbehavior "all" (the mean rate over them): the difference of their reductions against the
    reference, `stratified_difference`. Fewer than two shared prefixes or a reference rate of 0 give NaN."""
    import pandas as pd

    from mirl.evaluate.stats.rates import ALL
    from mirl.evaluate.stats.tables import samples_frame

    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot}: the bootstrap needs at least one draw")
    samples, rows = list(samples), []
    if not samples:
        return pd.DataFrame(columns=DIFFERENCE_COLUMNS)
    for judge, by_policy in _judged(samples_frame(samples)):
        ref = by_policy.get(reference)
        trained = [p for p in by_policy if p != reference]
        if ref is None:
            continue
        for i, policy in enumerate(trained):
            for other in trained[i + 1:]:
                a, b = by_policy[policy], by_policy[other]
                shared = sorted(set(ref) & set(a) & set(b))
                for m, strata in [*((m, lambda x, m=m: {m: x[m]}) for m in shared), (ALL, lambda x: x)]:
                    row = {"judge": judge, "misbehavior": m, "reference": reference, "policy": policy, "other": other}
                    try:
                        row.update(stratified_difference(strata(ref), strata(a), strata(b), n_boot, seed, level))
                    except ValueError:  # fewer than two shared prefixes
                        r, q, o = strata(ref), strata(a), strata(b)
                        row.update(prefixes=sum(len(set(r.get(x, {})) & set(q[x]) & set(o.get(x, {}))) for x in q))
                    if not row.get("base_rate", 0) > 0:
                        row.update(difference=math.nan, ci_low=math.nan, ci_high=math.nan)
                    rows.append(row)
    return pd.DataFrame(rows, columns=DIFFERENCE_COLUMNS)


def detectable_reduction(base_rates: Sequence[float], samples: int, prefixes: int | None = None,
                         alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest relative reduction detected with probability `power` (module docstring);
    `base_rates`: per-prefix rates of the base policy; `prefixes`: K (default: as many as given).
    1.0 or more means no reduction short of removing the misbehavior is detectable: returns inf."""
    p = np.asarray(base_rates, dtype=float)
    if p.size < 2 or samples < 1:
        raise ValueError("the design needs at least two prefixes' base rates and at least one sample a prefix")
    return stratified_detectable({"": p}, samples, {"": p.size if prefixes is None else int(prefixes)}, alpha, power)


def stratified_detectable(base_rates: Mapping[str, Sequence[float]], samples: int, prefixes: Mapping[str, int],
                          alpha: float = 0.05, power: float = 0.8) -> float:
    """`detectable_reduction` of the mean rate over misbehaviors (module docstring): `base_rates`:
    misbehavior -> its per-prefix base rates; `prefixes`: misbehavior -> the prefixes the evaluation
    takes of it (the misbehaviors measured). A misbehavior measured without rates of its own is an error."""
    if samples < 1:
        raise ValueError("the design needs at least one sample a prefix")
    measured = {m: int(k) for m, k in prefixes.items() if int(k) > 0}
    unknown = sorted(set(measured) - {m for m, v in base_rates.items() if len(v)})
    if unknown:
        raise ValueError(f"no base rates for misbehavior(s) {', '.join(map(repr, unknown))}")
    if not measured:
        return math.inf
    strata = [(np.asarray(base_rates[m], dtype=float), k) for m, k in measured.items()]
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    mean = float(np.mean([p.mean() for p, _ in strata]))
    if mean <= 0:
        return math.inf

    def margin(r: float) -> float:  # > 0: r is detected with the wanted power
        var = 0.0
        for p, k in strata:
            q = (1 - r) * p
            var += (r * r * float(p.var()) + float(np.mean(p * (1 - p) + q * (1 - q))) / samples) / k
        return r * mean - z * math.sqrt(var) / len(strata)

    if margin(1.0) <= 0:
        return math.inf
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if margin(mid) > 0 else (mid, hi)
    return hi


def design_line(base_rates: Mapping[str, Sequence[float]] | Sequence[float], samples: int,
                prefixes: Mapping[str, int] | int | None = None, target: float = 0.4) -> str:
    """One line for a plan's --check: what the design detects, against the reduction it is meant to see.
    `base_rates` and `prefixes` per misbehavior (`stratified_detectable`), or one list and a count."""
    if not isinstance(base_rates, Mapping):
        if len(base_rates) < 2:
            raise ValueError("the design needs at least two prefixes' base rates")
        base_rates = {"": list(base_rates)}
        prefixes = {"": len(base_rates[""]) if prefixes is None else int(prefixes)}
    elif not isinstance(prefixes, Mapping):
        raise ValueError("base rates given per misbehavior need the prefixes per misbehavior")
    r = stratified_detectable(base_rates, samples, prefixes)
    measured = [m for m, k in prefixes.items() if k > 0]
    k = sum(prefixes.values())
    mean = float(np.mean([np.mean(base_rates[m]) for m in measured or [m for m, v in base_rates.items() if len(v)]]))
    kinds = f" of {len(measured)} misbehaviors ({'/'.join(str(prefixes[m]) for m in measured)})" if len(measured) > 1 else ""
    verdict = "detectable" if r <= target else "NOT detectable"
    shown = "none short of 100%" if math.isinf(r) else f"{r:.0%}"
    return (f"{k} held-out prefixes{kinds} x {samples} samples, base rate {mean:.2f}: smallest relative "
            f"reduction detected at 95% with power 0.8: {shown}; {target:.0%} is {verdict}")
