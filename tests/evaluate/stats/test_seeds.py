"""Standard error against the number of seeds, by brute force over every k-subset, the finite-
population law for the spread of subset means, and the distribution of single-seed scores."""

from __future__ import annotations

import math
import statistics
from itertools import combinations

import numpy as np
import pytest

from mirl.evaluate.stats.seeds import k_subsets, seed_curve, seed_distribution

SCORES = {s: v for s, v in enumerate([0.31, 0.42, 0.28, 0.39, 0.35, 0.47, 0.30])}


def test_se_is_the_mean_over_all_k_subsets():
    curve = seed_curve(SCORES).set_index("k")
    values = list(SCORES.values())
    for k in range(2, len(values) + 1):
        subsets = list(combinations(values, k))
        expected = statistics.mean(statistics.stdev(s) / math.sqrt(k) for s in subsets)
        assert curve.loc[k, "se"] == pytest.approx(expected)
        assert curve.loc[k, "n_subsets"] == math.comb(len(values), k)
        assert curve.loc[k, "exhaustive"]
    assert math.isnan(curve.loc[1, "se"])  # one seed has no spread to estimate


def test_reference_is_one_over_root_k_scaled_at_one_seed():
    curve = seed_curve(SCORES)
    sd = statistics.stdev(SCORES.values())
    assert curve["reference"].tolist() == pytest.approx([sd / math.sqrt(k) for k in curve["k"]])


def test_spread_of_subset_means_follows_sampling_without_replacement():
    # Var(mean of k of N, without replacement) = S^2 / k * (N - k) / N, with S^2 the ddof=1 variance
    n = len(SCORES)
    s2 = statistics.variance(SCORES.values())
    curve = seed_curve(SCORES).set_index("k")
    for k in range(1, n + 1):
        assert curve.loc[k, "sd_of_means"] == pytest.approx(math.sqrt(s2 / k * (n - k) / n), abs=1e-12)


def test_too_many_subsets_are_sampled_with_a_seed():
    scores = {s: 0.3 + 0.02 * ((s * 5) % 16) for s in range(16)}
    full = seed_curve(scores, k_values=[8]).iloc[0]
    assert (full.n_subsets, full.exhaustive) == (math.comb(16, 8), True)
    capped = seed_curve(scores, k_values=[8], max_subsets=400, seed=5).iloc[0]
    assert (capped.n_subsets, capped.exhaustive) == (400, False)
    assert seed_curve(scores, k_values=[8], max_subsets=400, seed=5).iloc[0].se == capped.se
    assert seed_curve(scores, k_values=[8], max_subsets=400, seed=6).iloc[0].se != capped.se
    assert capped.se == pytest.approx(full.se, rel=0.05)


def test_sampled_subsets_hold_k_distinct_seeds():
    rows, exhaustive = k_subsets(16, 12, 300, np.random.default_rng(0))
    assert not exhaustive and rows.shape == (300, 12)
    assert all(len(set(row)) == 12 and set(row) <= set(range(16)) for row in rows.tolist())
    # every seed turns up: the draws are not stuck on a few
    assert set(rows.ravel().tolist()) == set(range(16))
    rows, exhaustive = k_subsets(5, 2, 10, np.random.default_rng(0))
    assert exhaustive and sorted(map(tuple, rows.tolist())) == list(combinations(range(5), 2))


def test_distribution_over_seeds():
    got = seed_distribution(SCORES)
    values = sorted(SCORES.values())
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    assert got == pytest.approx({"n": 7, "min": 0.28, "q1": q1, "median": median, "q3": q3,
                                 "mean": statistics.mean(values), "max": 0.47})
    assert median == statistics.median(values)


def test_a_seed_may_be_given_as_its_trials():
    by_seed = {0: [dict(task="a", reward=1.0), dict(task="b", reward=0.0)],
               1: [dict(task="a", reward=1.0), dict(task="b", reward=None, error="crash")],
               2: [dict(task="a", reward=0.5), dict(task="b", reward=1.0)]}
    assert seed_distribution(by_seed)["mean"] == pytest.approx((0.5 + 0.5 + 0.75) / 3)
    assert seed_distribution(by_seed, errored="drop")["max"] == 1.0  # seed 1 is task a alone


def test_bad_input():
    with pytest.raises(ValueError, match="non-empty mapping"):
        seed_curve({})
    with pytest.raises(ValueError, match=r"k must be whole numbers from 1 to the 7 seeds, got \[0, 8\]"):
        seed_curve(SCORES, k_values=[0, 2, 8])
    with pytest.raises(ValueError, match="seed 3: score nan"):
        seed_distribution({3: float("nan")})
    with pytest.raises(ValueError, match="seed 'x': trials: none given"):
        seed_distribution({"x": []})
