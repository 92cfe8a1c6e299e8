"""The RaR+ baseline's reward: the tests' pass/fail mixed with a judge's rubric rating.

    r_o = the task's tests pass (binary, as in the MiRL reward: partial credit is a fail)
    reward = w * r_o + (1 - w) * (rating - 1) / 9

with w the rubric's `tests_weight` (in [0.5, 1]) and the rating (1..10) from a rubric judge
(`mirl.roles.rubric_judge`). RaR+ has no misbehavior term, so `r_e` is always True. An
infrastructure failure (rollout error, verifier error, no verifier reward, a judge that could not
answer) gives an invalid Reward, left out of group statistics as in `mirl.training.rewards`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mirl.llm.errors import LLMError
from mirl.records.trajectory import Trajectory
from mirl.roles.rubric_writer import Rubric
from mirl.training.rewards import Reward, infrastructure_failure, invalid, outcome_passes


@dataclass
class RubricReward(Reward):
    rating: float | None = None  # the judge's 1..10
    tests_weight: float | None = None  # w of the rubric


def mix(r_o: bool, rating: float, tests_weight: float) -> float:
    """w * r_o + (1 - w) * (rating - 1) / 9."""
    if not 1.0 <= rating <= 10.0:
        raise ValueError(f"a rubric rating must be in [1, 10], got {rating!r}")
    return tests_weight * float(r_o) + (1.0 - tests_weight) * (rating - 1.0) / 9.0


def rar_reward(trajectory: Trajectory, verifier_reward: float | None, rubric: Rubric, judge: Any,
               prefix_steps: int | None = None) -> Reward:
    """The RaR+ reward of one rollout (module docstring). `verifier_reward` defaults to the
    trajectory's stored `reward`, `prefix_steps` to its `prefix_len`; `judge` is asked only when
    the rollout is valid."""
    if rubric.task != trajectory.task:
        raise ValueError(f"the rubric is for task {rubric.task!r}, the rollout for {trajectory.task!r}")
    vr = trajectory.reward if verifier_reward is None else verifier_reward
    bad = infrastructure_failure(trajectory, verifier_reward)
    if bad is not None:
        return bad
    start = trajectory.prefix_len if prefix_steps is None else prefix_steps
    try:
        rating = judge.rate(trajectory, rubric, start)
    except LLMError as e:  # the judge could not answer: says nothing of the policy
        return invalid(f"the rubric judge failed: {e}", vr)
    r_o = outcome_passes(float(vr))
    return RubricReward(r_o=r_o, r_e=True, reward=mix(r_o, rating.score, rubric.tests_weight),
                        judge_source=rating.source, judged_steps=tuple(rating.steps), verifier_reward=float(vr),
                        rating=float(rating.score), tests_weight=float(rubric.tests_weight))
