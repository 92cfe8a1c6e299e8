"""pass@k against brute-force enumeration of k-subsets and exact binomial coefficients, its edge
cases, and the per-task table with its task-clustered SE."""

from __future__ import annotations

import math
import statistics
from fractions import Fraction
from itertools import combinations

import pytest

from mirl.evaluate.stats.passk import pass_at_k, pass_at_k_table
from mirl.evaluate.stats.stderr import cluster_se


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_is_the_share_of_k_subsets_with_a_pass(n):
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(combinations(outcomes, k))
            brute = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


def test_pass_at_k_is_stable_for_large_n():
    # C(200, 50) has 47 digits; the product form needs no binomial coefficient at all
    for c, k in [(1, 1), (3, 10), (20, 50), (150, 50)]:
        exact = 1 - Fraction(math.comb(200 - c, k), math.comb(200, k))
        assert pass_at_k(200, c, k) == pytest.approx(float(exact), rel=1e-12)


def test_edge_cases():
    assert pass_at_k(5, 3, 3) == 1.0  # n - c = 2 < k: every 3-subset holds a pass
    assert pass_at_k(5, 0, 5) == 0.0
    assert pass_at_k(1, 1, 1) == 1.0
    for n, c, k, message in [(5, 1, 6, "k=6 must be between 1 and n=5"), (5, 1, 0, "k=0"),
                             (5, 6, 1, "0 <= c <= n"), (0, 0, 1, "n >= 1"), (5.0, 1, 1, "n must be a whole number"),
                             (5, True, 1, "c must be a whole number")]:
        with pytest.raises(ValueError, match=message):
            pass_at_k(n, c, k)


def trials(by_task):
    return [dict(task=t, reward=r) for t, rewards in by_task.items() for r in rewards]


def test_table_per_task_and_mean():
    got = pass_at_k_table(trials({"a": [1, 0, 1, 0], "b": [0, 0, 0, 1], "c": [0, 0]}), ks=[1, 3])
    per_task = got.per_task.set_index("task")
    assert per_task["c"].to_dict() == {"a": 2, "b": 1, "c": 0}
    # pass@3 of a: every 3 of 4 holds one of the 2 passes; b: 1 - C(3,3)/C(4,3) = 3/4; c: n = 2 < 3
    assert per_task.loc["a", "pass@3"] == 1.0 and per_task.loc["b", "pass@3"] == pytest.approx(0.75)
    assert math.isnan(per_task.loc["c", "pass@3"])
    summary = got.summary.set_index("k")
    assert summary.loc[1, "mean"] == pytest.approx((1 / 2 + 1 / 4 + 0) / 3)
    assert summary.loc[1, "se"] == pytest.approx(statistics.stdev([1 / 2, 1 / 4, 0]) / math.sqrt(3))
    assert (summary.loc[3, "n_tasks"], summary.loc[3, "n_short"]) == (2, 1)
    assert summary.loc[3, "mean"] == pytest.approx((1 + 0.75) / 2)


def test_pass_at_1_se_is_the_sample_se_clustered_by_task():
    by_task = {"a": [1, 1, 1, 0], "b": [0, 0, 0, 0], "c": [1, 1, 1, 1], "d": [0, 1, 0, 0]}
    got = pass_at_k_table(trials(by_task), ks=[1]).summary.iloc[0]
    flat = [r for rewards in by_task.values() for r in rewards]
    tasks = [t for t, rewards in by_task.items() for _ in rewards]
    assert got["mean"] == pytest.approx(statistics.mean(flat))
    assert got["se"] == pytest.approx(cluster_se(flat, tasks))
    # treating the 16 samples as independent would understate it
    assert got["se"] > statistics.stdev(flat) / math.sqrt(len(flat))


def test_partial_credit_and_errored_trials():
    rows = [dict(task="a", reward=0.5), dict(task="a", reward=1.0), dict(task="a", reward=None, error="crash"),
            dict(task="b", reward=0.9), dict(task="b", reward=0.2)]
    strict = pass_at_k_table(rows, ks=[1]).per_task.set_index("task")
    assert strict["c"].to_dict() == {"a": 1, "b": 0}  # 0.5 and 0.9 are fails at threshold 1.0
    assert strict["n"].to_dict() == {"a": 3, "b": 2}  # the errored trial counts as a fail
    assert strict.loc["a", "pass@1"] == pytest.approx(1 / 3)
    lenient = pass_at_k_table(rows, ks=[1], threshold=0.5, errored="drop").per_task.set_index("task")
    assert lenient["n"].to_dict() == {"a": 2, "b": 2}
    assert lenient["pass@1"].to_dict() == pytest.approx({"a": 1.0, "b": 0.5})


def test_table_bad_input():
    with pytest.raises(ValueError, match="trials: none given"):
        pass_at_k_table([], ks=[1])
    with pytest.raises(ValueError, match="no k given"):
        pass_at_k_table(trials({"a": [1]}), ks=[])
    with pytest.raises(ValueError, match="leaves nothing"):
        pass_at_k_table([dict(task="a", reward=None)], ks=[1], errored="drop")


def test_pass_at_k_equals_the_exact_rational_for_all_n_up_to_30():
    worst = 0.0
    for n in range(1, 31):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
                worst = max(worst, abs(pass_at_k(n, c, k) - float(exact)))
    assert worst < 1e-12


def test_pass_at_k_is_finite_and_accurate_up_to_n_1000():
    for n in (500, 1000):
        for c in (0, 1, 7, n // 3, n - 1, n):
            for k in (1, 2, 10, 100, n // 2, n):
                got = pass_at_k(n, c, k)
                exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
                assert math.isfinite(got) and got == pytest.approx(float(exact), rel=1e-9, abs=1e-12), (n, c, k)
