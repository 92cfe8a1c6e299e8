"""The plain and the cluster-robust standard error, against hand-worked tables and the matrix form
of the sandwich estimator."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from mirl.evaluate.stats.stderr import cluster_se, mean_se


def test_cluster_se_of_a_hand_worked_table():
    # values 1 1 0 | 0 0 | 1, mean 1/2; deviations summed per cluster: a +1/2, b -1, c +1/2
    # -> sum of squares 3/2; C/(C-1) = 3/2; sqrt(9/4) / n = (3/2) / 6
    assert cluster_se([1, 1, 0, 0, 0, 1], ["a", "a", "a", "b", "b", "c"]) == pytest.approx(0.25)


def sandwich_se(values, clusters):
    """Liang-Zeger sandwich for a regression on a constant, written with design matrices."""
    y = np.asarray(values, float)
    x = np.ones((len(y), 1))
    bread = np.linalg.inv(x.T @ x)
    residual = y - x @ (bread @ x.T @ y)
    labels = sorted(set(clusters))
    meat = np.zeros((1, 1))
    for label in labels:
        rows = [i for i, c in enumerate(clusters) if c == label]
        score = x[rows].T @ residual[rows]
        meat += np.outer(score, score)
    g = len(labels)
    return math.sqrt((bread @ meat @ bread)[0, 0] * g / (g - 1))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cluster_se_equals_the_sandwich_estimator(seed):
    rng = np.random.default_rng(seed)
    clusters = [int(c) for c in rng.integers(0, 7, size=60)]
    values = [float(v) for v in rng.random(60) + np.array(clusters) / 5]
    assert cluster_se(values, clusters) == pytest.approx(sandwich_se(values, clusters), rel=1e-12)


def test_one_sample_per_cluster_is_the_plain_standard_error():
    values = [0.2, 0.9, 0.4, 0.4, 1.0]
    plain = statistics.stdev(values) / math.sqrt(len(values))
    assert cluster_se(values, range(5)) == pytest.approx(plain)
    assert mean_se(values) == pytest.approx(plain)


def test_correlated_clusters_widen_the_standard_error():
    # each prefix's 4 samples agree: there are really only 4 independent observations, not 16
    values = [1.0] * 4 + [0.0] * 4 + [1.0] * 4 + [0.0] * 4
    clusters = [i // 4 for i in range(16)]
    assert cluster_se(values, clusters) == pytest.approx(mean_se([1.0, 0.0, 1.0, 0.0]))
    assert cluster_se(values, clusters) > 1.9 * mean_se(values)


def test_a_missing_cluster_label_is_a_cluster_of_its_own():
    # None labels are not dropped: 1 0 | 1 1 -> sums -1/2, +1/2 -> sqrt(2 * 1/2) / 4
    assert cluster_se([1, 0, 1, 1], [None, None, "a", "a"]) == pytest.approx(0.25)


def test_degenerate_and_bad_input():
    assert math.isnan(cluster_se([1, 0, 1], ["p", "p", "p"]))  # one cluster: no between-cluster spread
    assert math.isnan(mean_se([0.5]))
    with pytest.raises(ValueError, match="no values"):
        cluster_se([], [])
    with pytest.raises(ValueError, match="3 values but 2 cluster labels"):
        cluster_se([1, 0, 1], ["a", "b"])
    with pytest.raises(ValueError, match="finite"):
        mean_se([1.0, float("nan")])
