"""Benchmark scores of a policy run R times on a task set, in the two forms papers and leaderboards use.

- `run_scores`: each run's score (mean reward over its tasks), then mean and standard error over the
  R runs, as the paper reports "mean +- SE over 3 runs".
- `leaderboard_score`: Terminal-Bench's leaderboard form. p_t = mean reward of task t over its n_t
  trials; score = mean_t p_t over the T tasks; SE = sqrt(sum_t p_t (1 - p_t) / (n_t - 1)) / T;
  95% interval = score +- 1.96 SE. A task with n_t = 1 has no variance term (it contributes nothing
  to the sum, as the leaderboard's NULLIF(n_trials - 1, 0) does) and is counted in `n_single`; when
  no task has two trials nothing estimates the variance and SE is NaN. Partial-credit rewards are
  averaged as floats and p_t (1 - p_t) is kept: for rewards in [0, 1] it bounds their variance, so
  the SE stays conservative.
- `paired_difference`: two policies on the tasks both ran; the SE comes from the spread of the
  per-task differences, so task difficulty, shared by both, cancels.

Errored trials (see `tables`) follow a stated rule: errored="zero" counts them as reward 0 (the
leaderboard's COALESCE(reward, 0)); errored="drop" leaves them out, and a task left with no trials
is removed from T and listed in `dropped_tasks`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mirl.evaluate.stats.stderr import mean_se
from mirl.evaluate.stats.tables import apply_errored_rule, trials_frame

Z95 = 1.96  # the leaderboard's multiplier for its 95% interval


@dataclass(frozen=True)
class RunScores:
    per_run: pd.DataFrame  # run, score, n_trials, n_errored
    mean: float
    se: float  # NaN with a single run
    n_runs: int


@dataclass(frozen=True)
class LeaderboardScore:
    per_task: pd.DataFrame  # task, n, n_errored, mean, var_term (NaN where n = 1)
    score: float
    se: float
    ci_low: float
    ci_high: float
    n_tasks: int
    n_single: int  # tasks with one trial: no variance term
    dropped_tasks: tuple  # tasks whose every trial errored, under errored="drop"


@dataclass(frozen=True)
class PairedDifference:
    per_task: pd.DataFrame  # task, mean_a, mean_b, diff
    difference: float  # mean over shared tasks of (a - b)
    se: float  # NaN with a single shared task
    ci_low: float
    ci_high: float
    n_tasks: int
    only_a: tuple
    only_b: tuple


def run_scores(trials: Iterable[Any], errored: str = "zero") -> RunScores:
    """Mean and standard error over runs of each run's mean reward."""
    raw = trials_frame(trials, extra=("run",))
    df = apply_errored_rule(raw, errored)
    if df.empty:
        raise ValueError("run_scores: every trial errored and errored='drop' leaves nothing to score")
    per_task = df.groupby(["run", "task"], sort=True, dropna=False)["reward"].mean()
    scores = per_task.groupby(level="run", sort=True, dropna=False).mean()
    counts = raw.groupby("run", sort=True, dropna=False).agg(n_trials=("task", "size"), n_errored=("errored", "sum"))
    per_run = pd.DataFrame({"score": scores}).join(counts).reset_index()
    return RunScores(per_run=per_run, mean=float(scores.mean()), se=mean_se(scores.to_numpy()), n_runs=len(scores))


def task_means(trials: Iterable[Any], errored: str) -> tuple[pd.DataFrame, tuple]:
    """Per task: n (trials counted), n_errored, mean reward; plus the tasks the rule emptied."""
    raw = trials_frame(trials)
    df = apply_errored_rule(raw, errored)
    counted = df.groupby("task", sort=True, dropna=False)["reward"].agg(n="size", mean="mean")
    n_errored = raw.groupby("task", sort=True, dropna=False)["errored"].sum().rename("n_errored")
    dropped = tuple(t for t in n_errored.index if t not in counted.index)
    table = counted.join(n_errored)[["n", "n_errored", "mean"]].reset_index()
    return table, dropped


def leaderboard_score(trials: Iterable[Any], errored: str = "zero") -> LeaderboardScore:
    """Terminal-Bench's score (mean of task means), its SE and 95% interval; see the module docstring."""
    table, dropped = task_means(trials, errored)
    if table.empty:
        raise ValueError("leaderboard_score: every trial errored and errored='drop' leaves no task to score")
    p, n = table["mean"].to_numpy(), table["n"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        table["var_term"] = np.where(n > 1, p * (1.0 - p) / (n - 1), math.nan)
    n_tasks = len(table)
    score = float(p.mean())
    has_term = table["var_term"].notna()
    se = math.sqrt(float(table.loc[has_term, "var_term"].sum())) / n_tasks if has_term.any() else math.nan
    return LeaderboardScore(per_task=table, score=score, se=se, ci_low=score - Z95 * se, ci_high=score + Z95 * se,
                            n_tasks=n_tasks, n_single=int((n == 1).sum()), dropped_tasks=dropped)


def paired_difference(trials_a: Iterable[Any], trials_b: Iterable[Any], errored: str = "zero") -> PairedDifference:
    """Policy a minus policy b on the tasks both have, with the SE of the mean per-task difference."""
    table_a, _ = task_means(trials_a, errored)
    table_b, _ = task_means(trials_b, errored)
    a = table_a.set_index("task")["mean"]
    b = table_b.set_index("task")["mean"]
    shared = [t for t in a.index if t in b.index]
    if not shared:
        raise ValueError("paired_difference: the two policies share no scored task")
    per_task = pd.DataFrame({"task": shared, "mean_a": a[shared].to_numpy(), "mean_b": b[shared].to_numpy()})
    per_task["diff"] = per_task["mean_a"] - per_task["mean_b"]
    diff = float(per_task["diff"].mean())
    se = mean_se(per_task["diff"].to_numpy())
    return PairedDifference(per_task=per_task, difference=diff, se=se, ci_low=diff - Z95 * se,
                            ci_high=diff + Z95 * se, n_tasks=len(shared),
                            only_a=tuple(t for t in a.index if t not in b.index),
                            only_b=tuple(t for t in b.index if t not in a.index))
