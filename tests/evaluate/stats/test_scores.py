"""Benchmark scores over runs, Terminal-Bench's per-task leaderboard score and SE by its formula on
small tables, errored trials under both rules, and the paired difference of two policies."""

from __future__ import annotations

import math
import statistics

import pytest

from mirl.evaluate.stats.scores import leaderboard_score, paired_difference, run_scores


def trial(task, reward, run=0, error=None):
    return dict(task=task, reward=reward, run=run, error=error)


def table(rewards_by_task):
    """{task: [reward, ...]} -> trials, the i-th reward of each task in run i."""
    return [trial(t, r, run=i) for t, rewards in rewards_by_task.items() for i, r in enumerate(rewards)]


THREE = {"a": [1, 0, 1, 1], "b": [0, 0, 1], "c": [0.5, 1.0]}


def test_leaderboard_score_and_se_by_the_formula_on_three_tasks():
    got = leaderboard_score(table(THREE))
    p = {"a": 3 / 4, "b": 1 / 3, "c": 3 / 4}  # c: partial credit averaged as floats
    n = {"a": 4, "b": 3, "c": 2}
    score = sum(p.values()) / 3
    se = math.sqrt(sum(p[t] * (1 - p[t]) / (n[t] - 1) for t in p)) / 3
    assert got.score == pytest.approx(score)
    assert got.se == pytest.approx(se)
    assert (got.ci_low, got.ci_high) == pytest.approx((score - 1.96 * se, score + 1.96 * se))
    assert got.n_tasks == 3 and got.n_single == 0
    per_task = got.per_task.set_index("task")
    assert per_task["mean"].to_dict() == pytest.approx(p)
    assert per_task["n"].to_dict() == n


def test_the_score_is_a_mean_of_task_means_not_of_trials():
    # 4 trials of a (all pass) and 1 of b (fail): mean of task means 1/2, mean of trials would be 4/5
    assert leaderboard_score(table({"a": [1, 1, 1, 1], "b": [0, 0]})).score == pytest.approx(0.5)


def test_a_task_with_one_trial_has_no_variance_term():
    got = leaderboard_score(table({"a": [1, 0], "b": [1]}))
    # only a contributes: (1/2 * 1/2 / 1); T = 2
    assert got.se == pytest.approx(math.sqrt(0.25) / 2)
    assert got.n_single == 1
    assert math.isnan(got.per_task.set_index("task").loc["b", "var_term"])
    # no task with two trials: nothing estimates the variance
    assert math.isnan(leaderboard_score(table({"a": [1], "b": [0]})).se)


def errored_trials():
    return [trial("a", 1.0), trial("a", None, error="sandbox failed to start"), trial("a", 1.0),
            trial("b", 0.0, error="reward.txt is not a number"), trial("b", 1.0),
            trial("c", None, error="timeout"), trial("c", None),
            trial("d", 1.0, error="agent crashed; the reward is not trusted"), trial("d", 0.0)]


def test_errored_trials_count_as_zero():
    got = leaderboard_score(errored_trials(), errored="zero")
    per_task = got.per_task.set_index("task")
    # a: 1, 0, 1 -> 2/3; b: 0, 1 -> 1/2; c: 0, 0 -> 0; d: 0, 0 -> 0 (an errored trial is 0 whatever its reward)
    assert per_task["mean"].to_dict() == pytest.approx({"a": 2 / 3, "b": 1 / 2, "c": 0.0, "d": 0.0})
    assert per_task["n"].to_dict() == {"a": 3, "b": 2, "c": 2, "d": 2}
    assert per_task["n_errored"].to_dict() == {"a": 1, "b": 1, "c": 2, "d": 1}
    assert got.score == pytest.approx((2 / 3 + 1 / 2 + 0 + 0) / 4)
    assert got.dropped_tasks == ()


def test_errored_trials_dropped():
    got = leaderboard_score(errored_trials(), errored="drop")
    per_task = got.per_task.set_index("task")
    # a: 1, 1 -> 1; b: 1 -> 1 and d: 0 -> 0 (one trial left: no variance term); c: nothing left, removed from T
    assert per_task["mean"].to_dict() == pytest.approx({"a": 1.0, "b": 1.0, "d": 0.0})
    assert per_task["n"].to_dict() == {"a": 2, "b": 1, "d": 1}
    assert got.dropped_tasks == ("c",)
    assert (got.score, got.n_tasks, got.n_single) == (pytest.approx(2 / 3), 3, 2)
    assert got.se == 0.0


def test_run_scores_mean_and_se_over_runs():
    trials = table({"a": [1, 0, 1], "b": [1, 1, 0], "c": [0, 0, 0.5]})
    got = run_scores(trials)
    per_run = [2 / 3, 1 / 3, 1 / 2]  # run 0: a 1, b 1, c 0; run 1: 0 1 0; run 2: 1 0 0.5
    assert got.per_run["score"].tolist() == pytest.approx(per_run)
    assert got.mean == pytest.approx(statistics.mean(per_run))
    assert got.se == pytest.approx(statistics.stdev(per_run) / math.sqrt(3))
    assert got.n_runs == 3


def test_run_scores_errored_rules():
    trials = [trial("a", 1.0, run=0), trial("b", None, run=0, error="crash"),
              trial("a", 0.0, run=1), trial("b", 1.0, run=1)]
    zero = run_scores(trials, errored="zero")
    assert zero.per_run["score"].tolist() == pytest.approx([0.5, 0.5])
    assert zero.per_run["n_errored"].tolist() == [1, 0]
    drop = run_scores(trials, errored="drop")
    assert drop.per_run["score"].tolist() == pytest.approx([1.0, 0.5])
    assert math.isnan(run_scores([trial("a", 1.0)]).se)  # one run: no spread over runs


def test_paired_difference_from_per_task_differences():
    a = table({"t1": [1, 1], "t2": [0, 1], "t3": [1, 0], "t4": [1, 1], "only-a": [1]})
    b = table({"t1": [1, 0], "t2": [0, 0], "t3": [0, 0], "t4": [1, 1], "only-b": [0]})
    got = paired_difference(a, b)
    diffs = [0.5, 0.5, 0.5, 0.0]
    assert got.per_task.set_index("task")["diff"].to_dict() == pytest.approx(dict(zip(["t1", "t2", "t3", "t4"], diffs)))
    assert got.difference == pytest.approx(statistics.mean(diffs))
    assert got.se == pytest.approx(statistics.stdev(diffs) / 2)
    assert got.ci_low == pytest.approx(got.difference - 1.96 * got.se)
    assert (got.n_tasks, got.only_a, got.only_b) == (4, ("only-a",), ("only-b",))


def test_pairing_removes_the_task_difficulty_both_policies_share():
    # b is a uniformly 0.1 worse on tasks of very different difficulty: the paired SE is 0
    a = table({"easy": [1.0], "mid": [0.6], "hard": [0.2]})
    b = table({"easy": [0.9], "mid": [0.5], "hard": [0.1]})
    got = paired_difference(a, b)
    assert got.difference == pytest.approx(0.1)
    assert got.se == pytest.approx(0.0, abs=1e-12)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="trials: none given"):
        leaderboard_score([])
    for bad in (1.5, -0.1, float("nan"), "1"):
        with pytest.raises(ValueError, match=r"trial 1: 'reward' must be a number in \[0, 1\] or None"):
            leaderboard_score([trial("a", 1.0), trial("a", bad)])
    with pytest.raises(ValueError, match="trial 0: no field 'task'"):
        leaderboard_score([{"reward": 1.0}])
    with pytest.raises(ValueError, match="trial 0: no field 'run'"):
        run_scores([{"task": "a", "reward": 1.0}])
    with pytest.raises(ValueError, match="errored='skip'"):
        leaderboard_score([trial("a", 1.0)], errored="skip")
    with pytest.raises(ValueError, match="leaves no task"):
        leaderboard_score([trial("a", None)], errored="drop")
    with pytest.raises(ValueError, match="share no scored task"):
        paired_difference([trial("a", 1.0)], [trial("b", 1.0)])
