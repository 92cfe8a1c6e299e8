"""Misbehavior rates per (policy, misbehavior, judge): the mean of the prefixes' shares, its SE over
prefixes and the bootstrap over prefixes, on tables worked out by hand; the mean rate over misbehaviors."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from mirl.evaluate.stats.rates import misbehavior_rates, stratified_means


def samples(policy, misbehavior, judge, by_prefix):
    """{prefix_id: [repeated, ...]} -> sample records."""
    return [dict(policy=policy, misbehavior=misbehavior, judge=judge, prefix_id=p, sample=i, repeated=r)
            for p, labels in by_prefix.items() for i, r in enumerate(labels)]


HAND = {"P1": [True, True, True, False], "P2": [False, False, None, False], "P3": [True, False]}


def test_rate_counts_and_se_of_a_hand_table():
    row = misbehavior_rates(samples("base", "loop", "judge-a", HAND)).iloc[0]
    # judged: P1 3 of 4, P2 0 of 3 (one judge failure), P3 1 of 2: each prefix's share weighs alike
    assert (row.n_prefixes, row.n_samples, row.n_failed) == (3, 9, 1)
    shares = np.array([3 / 4, 0, 1 / 2])
    assert row.rate == pytest.approx(shares.mean())
    assert row.se == pytest.approx(shares.std(ddof=1) / math.sqrt(3))


def test_bootstrap_resamples_whole_prefixes():
    # two prefixes, one always repeats, one never: a draw of prefixes is (P1,P1) -> 1, (P2,P2) -> 0 or
    # mixed -> 1/2, each pure draw with chance 1/4, so the 95% interval is [0, 1]. Resampling the 8
    # samples one by one would put only (6/8)^8 + (2/8)^8 of the mass at 0 or 1, and a narrower interval.
    row = misbehavior_rates(samples("base", "loop", "j", {"P1": [True] * 6, "P2": [False] * 2})).iloc[0]
    assert row.rate == 0.5  # each prefix alike; the pooled share of samples would be 6/8
    assert (row.ci_low, row.ci_high) == (0.0, 1.0)


# Four prefixes of unequal sizes: (repeats, samples).
EXACT = {"A": (5, 6), "B": (0, 3), "C": (2, 9), "D": (1, 1)}


def exact_bootstrap(table):
    """Every one of the n^n equally likely ordered draws of n prefixes: {mean share: probability}."""
    import itertools
    from fractions import Fraction

    pmf: dict[Fraction, Fraction] = {}
    n = len(table)
    for draw in itertools.product(table.values(), repeat=n):
        share = sum(Fraction(r, m) for r, m in draw) / n
        pmf[share] = pmf.get(share, 0) + Fraction(1, n ** n)
    return pmf


def exact_samples():
    return samples("base", "loop", "j", {p: [True] * r + [False] * (m - r) for p, (r, m) in EXACT.items()})


def test_the_bootstrap_distribution_matches_every_resample_enumerated():
    pmf = exact_bootstrap(EXACT)
    n_boot = 40_000
    shares = np.array([r / m for r, m in EXACT.values()])
    means = stratified_means([shares], n_boot, np.random.default_rng(0))
    atoms = np.array([float(a) for a in pmf])
    # every draw is one of the exact shares (the mean of four prefixes'), each as often as enumerated
    nearest = np.abs(means[:, None] - atoms[None, :]).argmin(axis=1)
    assert np.allclose(means, atoms[nearest])
    freq = np.bincount(nearest, minlength=len(atoms)) / n_boot
    prob = np.array([float(p) for p in pmf.values()])
    assert np.all(np.abs(freq - prob) <= 5 * np.sqrt(prob * (1 - prob) / n_boot) + 1e-9)
    mean = sum(a * p for a, p in pmf.items())
    sd = math.sqrt(float(sum(p * (a - mean) ** 2 for a, p in pmf.items())))
    assert means.mean() == pytest.approx(float(mean), abs=5 * sd / math.sqrt(n_boot))
    assert means.std() == pytest.approx(sd, rel=0.03)


@pytest.mark.parametrize("level", [0.5, 0.8, 0.95])
def test_the_interval_is_the_exact_bootstraps_percentiles(level):
    pmf = sorted(exact_bootstrap(EXACT).items())
    row = misbehavior_rates(exact_samples(), n_boot=40_000, seed=1, level=level).iloc[0]
    low, high = row.ci_low, row.ci_high
    alpha, tol = (1 - level) / 2, 0.01

    def below(x, strict):
        return float(sum(p for a, p in pmf if (a < x - 1e-12 if strict else a <= x + 1e-12)))

    # an endpoint is a quantile of the exact distribution, up to Monte-Carlo error in the mass
    for x, q in ((low, alpha), (high, 1 - alpha)):
        assert below(x, strict=True) <= q + tol and below(x, strict=False) >= q - tol, (level, x, q)


def spread_table():
    labels = {f"P{i}": [(i * 7 + j) % 5 < (i % 4) for j in range(4 + 3 * (i % 5))] for i in range(12)}
    return samples("base", "loop", "j", labels)


def test_bootstrap_is_seeded_and_the_interval_holds_the_estimate():
    first = misbehavior_rates(spread_table(), seed=3).iloc[0]
    again = misbehavior_rates(spread_table(), seed=3).iloc[0]
    other = misbehavior_rates(spread_table(), seed=4).iloc[0]
    assert (first.ci_low, first.ci_high) == (again.ci_low, again.ci_high)
    assert (first.ci_low, first.ci_high) != (other.ci_low, other.ci_high)
    assert first.ci_low < first.rate < first.ci_high
    narrow = misbehavior_rates(spread_table(), seed=3, level=0.5).iloc[0]
    assert first.ci_low < narrow.ci_low < first.rate < narrow.ci_high < first.ci_high


def test_a_groups_interval_does_not_depend_on_the_other_groups():
    alone = misbehavior_rates(spread_table(), seed=1).iloc[0]
    other = samples("trained", "loop", "j", {"Q1": [True, False], "Q2": [False, False]})
    together = misbehavior_rates(other + spread_table(), seed=1)
    row = together[together.policy == "base"].iloc[0]
    assert (row.ci_low, row.ci_high) == (alone.ci_low, alone.ci_high)


def test_one_row_per_policy_misbehavior_and_judge():
    data = (samples("base", "loop", "a", {"P1": [True, True], "P2": [True, False]})
            + samples("base", "loop", "b", {"P1": [False, False], "P2": [True, False]})
            + samples("trained", "loop", "a", {"P1": [False, False], "P2": [False, True]})
            + samples("base", "ignore-error", "a", {"P9": [True, False, False, False]}))
    table = misbehavior_rates(data).set_index(["policy", "misbehavior", "judge"])
    assert table.loc[("base", "loop", "a"), "rate"] == pytest.approx(3 / 4)
    assert table.loc[("base", "loop", "b"), "rate"] == pytest.approx(1 / 4)
    assert table.loc[("trained", "loop", "a"), "rate"] == pytest.approx(1 / 4)
    assert table.loc[("base", "ignore-error", "a"), "rate"] == pytest.approx(1 / 4)
    assert len(table) == 4


def test_one_prefix_has_no_interval_and_an_all_failed_group_has_no_rate():
    table = misbehavior_rates(samples("base", "loop", "a", {"P1": [True, False]})
                              + samples("base", "loop", "b", {"P1": [None, None]})).set_index("judge")
    assert table.loc["a", "rate"] == 0.5
    assert all(math.isnan(table.loc["a", c]) for c in ("se", "ci_low", "ci_high"))
    assert math.isnan(table.loc["b", "rate"])
    assert (table.loc["b", "n_samples"], table.loc["b", "n_failed"]) == (0, 2)


@dataclass
class Judged:
    policy: str
    misbehavior: str
    prefix_id: str
    judge: str
    repeated: bool | None


def test_records_may_be_objects_with_the_fields():
    rows = [Judged("base", "loop", "P1", "a", True), Judged("base", "loop", "P2", "a", False)]
    assert misbehavior_rates(rows).iloc[0].rate == 0.5


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="samples: none given"):
        misbehavior_rates([])
    good = dict(policy="p", misbehavior="m", prefix_id="P1", judge="j", repeated=True)
    with pytest.raises(ValueError, match="sample 1: 'repeated' must be True, False or None"):
        misbehavior_rates([good, {**good, "repeated": "yes"}])
    with pytest.raises(ValueError, match="sample 0: no field 'prefix_id'"):
        misbehavior_rates([{k: v for k, v in good.items() if k != "prefix_id"}])
    with pytest.raises(ValueError, match="n_boot"):
        misbehavior_rates([good], n_boot=0)


def test_the_clustered_interval_is_wider_than_the_naive_one_on_correlated_samples():
    """Samples of one prefix agree (all yes or all no): 8 prefixes of 8-16 samples carry the information of
    8, so the interval over prefixes must be wider than one that treats 128 samples as independent."""
    import random

    rng = random.Random(1)
    by_prefix = {f"P{i}": [rng.random() < 0.5] * (8 + 4 * (i % 3)) for i in range(8)}
    row = misbehavior_rates(samples("base", "loop", "j", by_prefix), n_boot=4000).iloc[0]
    p, n = row.rate, row.n_samples
    naive_half = 1.96 * math.sqrt(p * (1 - p) / n)
    assert 0 < p < 1
    assert (row.ci_high - row.ci_low) / 2 > 2 * naive_half
    assert row.se > 2 * math.sqrt(p * (1 - p) / n)


def test_the_mean_rate_weighs_each_misbehavior_alike():
    rows = (samples("base", "often", "j", {"A": [True, True], "B": [True, False]})
            + samples("base", "rare", "j", {f"R{i}": [False, False] for i in range(6)} | {"S": [True, False]}))
    table = misbehavior_rates(rows, n_boot=500, overall=True).set_index("misbehavior")
    assert table.loc["often", "rate"] == 0.75 and table.loc["rare", "rate"] == pytest.approx(1 / 14)
    mean = table.loc["all"]
    assert mean["rate"] == pytest.approx((0.75 + 1 / 14) / 2)  # pooled over the 9 prefixes it would be 0.222
    assert (mean["n_prefixes"], mean["n_samples"]) == (9, 18)
    assert mean["se"] == pytest.approx(math.sqrt(table.loc["often", "se"] ** 2 + table.loc["rare", "se"] ** 2) / 2)
    assert mean["ci_low"] < mean["rate"] < mean["ci_high"]
    with pytest.raises(ValueError, match="mean over the misbehaviors"):
        misbehavior_rates(samples("base", "all", "j", {"A": [True]}), overall=True)


def test_the_mean_rate_draws_prefixes_within_each_misbehavior():
    """A misbehavior always repeated and one never: every draw within each keeps the mean rate at 1/2
    (a draw of prefixes across misbehaviors would move it, and widen the interval)."""
    rows = (samples("base", "always", "j", {f"A{i}": [True, True] for i in range(3)})
            + samples("base", "never", "j", {f"N{i}": [False, False] for i in range(9)}))
    mean = misbehavior_rates(rows, n_boot=500, overall=True).set_index("misbehavior").loc["all"]
    assert (mean["rate"], mean["ci_low"], mean["ci_high"]) == (0.5, 0.5, 0.5)


def test_each_policys_mean_rate_is_over_the_misbehaviors_every_policy_was_measured_on():
    rows = (samples("base", "m1", "j", {"a": [True, False], "b": [True, False]})
            + samples("base", "m2", "j", {"c": [False, False], "d": [False, False]})
            + samples("mirl", "m1", "j", {"a": [True, False], "b": [False, True]})
            + samples("mirl", "m2", "j", {"c": [None, None], "d": [None]}))  # its judge failed on every m2 sample
    table = misbehavior_rates(rows, n_boot=200, overall=True)
    mean = table[table.misbehavior == "all"].set_index("policy")
    assert mean.loc["base", "rate"] == 0.5 and mean.loc["mirl", "rate"] == 0.5  # both over m1 alone
    assert mean.loc["base", "n_prefixes"] == 2 and mean.loc["mirl", "n_failed"] == 3  # its failures stay visible
