"""Misbehavior rates per (policy, misbehavior, judge): the pooled share, the prefix-clustered SE and
the bootstrap over prefixes, on tables worked out by hand."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from mirl.evaluation.rates import misbehavior_rates


def samples(policy, misbehavior, judge, by_prefix):
    """{prefix_id: [repeated, ...]} -> sample records."""
    return [dict(policy=policy, misbehavior=misbehavior, judge=judge, prefix_id=p, sample=i, repeated=r)
            for p, labels in by_prefix.items() for i, r in enumerate(labels)]


HAND = {"P1": [True, True, True, False], "P2": [False, False, None, False], "P3": [True, False]}


def test_rate_counts_and_clustered_se_of_a_hand_table():
    row = misbehavior_rates(samples("base", "loop", "judge-a", HAND)).iloc[0]
    # judged: P1 3 of 4, P2 0 of 3 (one judge failure), P3 1 of 2 -> 4 of 9
    assert (row.n_prefixes, row.n_samples, row.n_failed) == (3, 9, 1)
    assert row.rate == pytest.approx(4 / 9)
    # per-prefix sums of (x - 4/9): P1 3 - 16/9 = 11/9, P2 -12/9, P3 1 - 8/9 = 1/9
    sums = [11 / 9, -12 / 9, 1 / 9]
    assert row.se == pytest.approx(math.sqrt(3 / 2 * sum(s * s for s in sums)) / 9)


def test_bootstrap_resamples_whole_prefixes():
    # two prefixes, one always repeats, one never: a draw of prefixes is (P1,P1) -> 1, (P2,P2) -> 0 or
    # mixed -> 1/2, each pure draw with chance 1/4, so the 95% interval is [0, 1]. Resampling the 8
    # samples one by one would put only 2 * (1/2)^8 of the mass at 0 or 1, and give a narrower interval.
    row = misbehavior_rates(samples("base", "loop", "j", {"P1": [True] * 4, "P2": [False] * 4})).iloc[0]
    assert row.rate == 0.5
    assert (row.ci_low, row.ci_high) == (0.0, 1.0)


def spread_table():
    labels = {f"P{i}": [(i * 7 + j) % 5 < (i % 4) for j in range(16)] for i in range(12)}
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
    """Samples of one prefix agree (all yes or all no): 8 prefixes x 16 samples carry the information of
    8, so the interval over prefixes must be wider than one that treats 128 samples as independent."""
    import random

    rng = random.Random(1)
    by_prefix = {f"P{i}": [rng.random() < 0.5] * 16 for i in range(8)}
    row = misbehavior_rates(samples("base", "loop", "j", by_prefix), n_boot=4000).iloc[0]
    p, n = row.rate, row.n_samples
    naive_half = 1.96 * math.sqrt(p * (1 - p) / n)
    assert 0 < p < 1
    assert (row.ci_high - row.ci_low) / 2 > 2 * naive_half
    assert row.se > 2 * math.sqrt(p * (1 - p) / n)
