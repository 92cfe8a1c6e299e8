"""Standard errors of a mean: the plain one, and the cluster-robust one for correlated samples.

Samples that share a prefix (16 continuations of one prefix) or a task (R runs of one task) are
correlated, so the plain SE, which counts each as independent evidence, is too small. The clustered
SE follows inspect_ai's `stderr(cluster=...)` (Miller, "Adding Error Bars to Evals", Appendix A,
with a finite-cluster correction):

    SE = sqrt( C/(C-1) * sum_c ( sum_{i in c} (x_i - mean) )^2 ) / n

over C clusters and n samples. With one sample per cluster it equals the plain SE, s / sqrt(n).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd


def mean_se(values: Sequence[float]) -> float:
    """s / sqrt(n) with the sample standard deviation (ddof=1); NaN for fewer than two values."""
    x = _values(values)
    if len(x) < 2:
        return math.nan
    return float(np.std(x, ddof=1) / math.sqrt(len(x)))


def cluster_se(values: Sequence[float], clusters: Sequence[object]) -> float:
    """Cluster-robust standard error of mean(values); NaN for fewer than two clusters.

    One cluster says nothing about how clusters differ (the C/(C-1) factor is undefined), so the
    answer is NaN rather than a misleading 0.
    """
    x = _values(values)
    c = np.asarray(list(clusters), dtype=object)
    if len(c) != len(x):
        raise ValueError(f"cluster_se: {len(x)} values but {len(c)} cluster labels")
    codes, _ = pd.factorize(c, use_na_sentinel=False)
    sums = np.bincount(codes, weights=x - x.mean())
    n_clusters = len(sums)
    if n_clusters < 2:
        return math.nan
    return float(math.sqrt(n_clusters / (n_clusters - 1) * float(np.sum(sums ** 2))) / len(x))


def _values(values: Sequence[float]) -> np.ndarray:
    x = np.asarray(list(values), dtype=float)
    if x.ndim != 1 or len(x) == 0:
        raise ValueError("no values given (a standard error needs at least one)")
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite numbers (drop or fill NaN first)")
    return x
