"""The RaR+ reward: w * r_o + (1 - w) * (rating - 1) / 9, with infrastructure failures invalid."""

from __future__ import annotations

import pytest

from mirl.llm.errors import LLMError
from mirl.records.trajectory import Step, Trajectory
from mirl.roles.rubric_judge import Rating, RuleRubricJudge
from mirl.roles.rubric_writer import Rubric, RubricItem
from mirl.training.rubric_reward import RubricReward, rar_reward

ITEMS = [RubricItem("Runs make", 5.0, "Essential", r"command:\bmake\b"),
         RubricItem("Runs the tests", 3.0, "Important", r"command:\bpytest\b")]
ITEMS += [RubricItem(f"text only {k}", 1.0, "Optional") for k in range(5)]


def rubric(w: float) -> Rubric:
    return Rubric("t", ITEMS, w)


def rollout(reward: float | None = 1.0, **kw) -> Trajectory:
    steps = [Step(reasoning="", command="ls", source="prefix"), Step(reasoning="", command="make", output="ok")]
    return Trajectory(task="t", seed=0, models={}, steps=steps, reward=reward, exit_reason="submitted", prefix_len=1, **kw)


class FixedJudge:
    """Rates every rollout the same and records what it was asked."""

    def __init__(self, score: float = 5.5, fail: bool = False):
        self.score, self.fail, self.asked = score, fail, []

    def rate(self, trajectory, rubric, prefix_steps=0):
        self.asked.append(prefix_steps)
        if self.fail:
            raise LLMError("invalid_json", "no score tag after 3 asks", role="rubric_judge")
        return Rating(score=self.score, source="test:fixed", steps=[1])


@pytest.mark.parametrize("verifier,w,score,expected", [
    (1.0, 0.8, 5.5, 0.8 + 0.2 * 0.5),  # passed: w plus a share of the rating
    (1.0, 0.5, 10.0, 1.0),
    (0.0, 0.5, 10.0, 0.5),  # failed tests: only the rubric's part
    (0.5, 0.6, 4.0, 0.4 * 3 / 9),  # partial credit is a fail
    (1.0, 1.0, 1.0, 1.0),  # w = 1: the tests alone
    (0.0, 0.7, 1.0, 0.0),
])
def test_the_reward_mixes_tests_and_rating(verifier, w, score, expected):
    r = rar_reward(rollout(verifier), None, rubric(w), FixedJudge(score))
    assert isinstance(r, RubricReward) and r.valid
    assert r.reward == pytest.approx(expected) and r.r_o == (verifier >= 1.0)
    assert r.rating == score and r.tests_weight == w and r.judge_source == "test:fixed" and r.verifier_reward == verifier


def test_with_the_rule_judge():
    """Against the rule judge: make is met (5 of the checkable 8), pytest not: rating 1 + 9 * 5/8."""
    r = rar_reward(rollout(1.0), None, rubric(0.75), RuleRubricJudge())
    assert r.rating == pytest.approx(1 + 9 * 5 / 8) and r.reward == pytest.approx(0.75 + 0.25 * (9 * 5 / 8) / 9)
    assert r.judged_steps == (1,)


def test_the_given_verifier_reward_and_prefix_override_the_stored_ones():
    judge = FixedJudge(10.0)
    r = rar_reward(rollout(0.0), 1.0, rubric(0.9), judge, prefix_steps=0)
    assert r.r_o and r.reward == pytest.approx(1.0) and judge.asked == [0]
    rar_reward(rollout(0.0), None, rubric(0.9), judge)
    assert judge.asked == [0, 1]  # the trajectory's prefix_len by default


@pytest.mark.parametrize("kw,why", [
    ({"exit_reason": "error", "error": "sandbox died"}, "the rollout failed: sandbox died"),
    ({"verifier_error": "test.sh timed out"}, "the verifier failed: test.sh timed out"),
    ({"reward": None}, "no verifier reward"),
])
def test_infrastructure_failures_are_invalid_and_the_judge_is_not_asked(kw, why):
    t = rollout(kw.pop("reward", 1.0))
    for k, v in kw.items():
        setattr(t, k, v)
    judge = FixedJudge()
    r = rar_reward(t, None, rubric(0.8), judge)
    assert not r.valid and r.why_invalid == why and r.reward == 0.0 and judge.asked == []


def test_a_judge_that_cannot_answer_makes_the_reward_invalid():
    r = rar_reward(rollout(1.0), None, rubric(0.8), FixedJudge(fail=True))
    assert not r.valid and r.why_invalid.startswith("the rubric judge failed: invalid_json")


def test_a_rubric_of_another_task_is_refused():
    with pytest.raises(ValueError, match="the rubric is for task 'other'"):
        rar_reward(rollout(), None, Rubric("other", ITEMS, 0.8), FixedJudge())
