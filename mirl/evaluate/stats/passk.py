"""Unbiased pass@k: the chance that at least one of k samples, drawn without replacement from a
task's n samples of which c passed, passes (Chen et al., the HumanEval estimator):

    pass@k = 1 - C(n-c, k) / C(n, k) = 1 - prod_{i=n-c+1}^{n} (1 - k / i),   and 1 when n - c < k,

computed as the product so no binomial coefficient overflows. The benchmark's pass@k is the mean
over tasks; the samples of one task are correlated, so its SE is clustered by task (with one value
per task this is the SE over tasks, and for k = 1 with equal n it equals the sample-level SE
clustered by task).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mirl.evaluate.stats.stderr import cluster_se
from mirl.evaluate.stats.tables import apply_errored_rule, trials_frame


def pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k of a task with n samples, c of them passing."""
    for name, value in (("n", n), ("c", c), ("k", k)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise ValueError(f"pass_at_k: {name} must be a whole number, got {value!r}")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: k={k} must be between 1 and n={n} (k samples drawn from n)")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


@dataclass(frozen=True)
class PassAtK:
    per_task: pd.DataFrame  # task, n, c, and pass@k per k (NaN where n < k)
    summary: pd.DataFrame  # k, n_tasks, n_short (tasks with n < k, left out), mean, se


def pass_at_k_table(trials: Iterable[Any], ks: Sequence[int], threshold: float = 1.0,
                    errored: str = "zero") -> PassAtK:
    """pass@k per task and its mean over tasks, for each k.

    A trial passes when its reward is at least `threshold` (1.0: partial credit is a fail, as in the
    MiRL reward). Errored trials count as fails ("zero") or are left out ("drop"). A task with fewer
    than k samples has no pass@k: NaN in its row, left out of that k's mean and counted in n_short.
    """
    ks = list(ks)
    if not ks:
        raise ValueError("pass_at_k_table: no k given")
    df = apply_errored_rule(trials_frame(trials), errored)
    if df.empty:
        raise ValueError("pass_at_k_table: every trial errored and errored='drop' leaves nothing")
    df["passed"] = df["reward"] >= threshold
    per_task = df.groupby("task", sort=True, dropna=False)["passed"].agg(n="size", c="sum").reset_index()
    per_task["c"] = per_task["c"].astype(int)
    rows = []
    for k in ks:
        column = f"pass@{k}"
        per_task[column] = [pass_at_k(int(n), int(c), k) if n >= k else math.nan
                            for n, c in zip(per_task["n"], per_task["c"])]
        scored = per_task[per_task[column].notna()]
        values = scored[column].to_numpy()
        rows.append({"k": k, "n_tasks": len(scored), "n_short": len(per_task) - len(scored),
                     "mean": float(values.mean()) if len(values) else math.nan,
                     "se": cluster_se(values, scored["task"]) if len(values) else math.nan})
    return PassAtK(per_task=per_task, summary=pd.DataFrame(rows, columns=["k", "n_tasks", "n_short", "mean", "se"]))
