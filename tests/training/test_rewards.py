"""The MiRL reward: the task solved AND the misbehavior avoided; a broken rollout is invalid, never 0."""

from __future__ import annotations

import itertools

import pytest

from mirl.llm.client import LLMClient
from mirl.llm.config import with_model
from mirl.llm.scripted import ScriptedModel, register, unregister
from mirl.records.taxonomy import ErrorType
from mirl.records.trajectory import Step, Trajectory
from mirl.roles.behavior_judge import LLMBehaviorJudge, RuleBehaviorJudge
from mirl.training.rewards import mirl_reward

RETRY = ErrorType("retries failed command unchanged", "Re-runs a failed command unchanged.",
                  provenance="rules: rules:retry-unchanged-after-failure")


def rollout(repeats: bool, reward: float | None = 1.0, **kw) -> Trajectory:
    """A one-step prefix whose command failed, then the policy either retries it unchanged or edits first."""
    steps = [Step(reasoning="", command="make", exit_code=2, output="error", source="prefix")]
    steps += [Step(reasoning="", command="make" if repeats else "vi Makefile", exit_code=0),
              Step(reasoning="", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", exit_code=0)]
    return Trajectory(task="t", seed=0, models={}, instruction="Build it.", steps=steps, prefix_len=1,
                      reward=reward, exit_reason=kw.pop("exit_reason", "submitted"), **kw)


class Says:
    """A judge that answers a fixed yes/no and remembers what it was asked."""

    def __init__(self, yes: bool):
        self.yes, self.asked = yes, []

    def judge(self, trajectory, misbehavior, prefix_steps=None):
        from mirl.roles.behavior_judge import Judgment

        self.asked.append((trajectory, misbehavior, prefix_steps))
        return Judgment(yes=self.yes, source="test", steps=[1])


@pytest.mark.parametrize("passes,judged_yes", list(itertools.product([True, False], repeat=2)))
def test_the_reward_is_the_and_of_its_parts(passes, judged_yes):
    r = mirl_reward(rollout(False), None, 1.0 if passes else 0.0, Says(judged_yes), RETRY)
    assert r.valid and r.r_o is passes and r.r_e is (not judged_yes)
    assert r.reward == (1.0 if passes and not judged_yes else 0.0) and isinstance(r.reward, float)


def test_partial_credit_is_a_failed_outcome_and_the_stored_reward_is_the_default():
    assert mirl_reward(rollout(False), None, 0.99, Says(False), RETRY).r_o is False
    assert mirl_reward(rollout(False, reward=0.5), None, None, Says(False), RETRY).reward == 0.0
    assert mirl_reward(rollout(False, reward=1.0), None, None, Says(False), RETRY).reward == 1.0


def test_the_rule_judge_decides_r_e_on_the_post_prefix_steps():
    judge = RuleBehaviorJudge()
    assert mirl_reward(rollout(repeats=True), None, 1.0, judge, RETRY).to_dict()["reward"] == 0.0
    clean = mirl_reward(rollout(repeats=False), None, 1.0, judge, RETRY)
    assert clean.reward == 1.0 and clean.judge_source == "rules:retry-unchanged-after-failure"
    assert clean.judged_steps == (1, 2)


@pytest.mark.parametrize("broken,why", [
    (dict(exit_reason="error", error="sandbox died"), "sandbox died"),
    (dict(verifier_error="tests did not run"), "tests did not run"),
    (dict(reward=None), "no verifier reward"),
])
def test_an_infrastructure_failure_is_invalid_not_zero(broken, why):
    judge = Says(False)
    r = mirl_reward(rollout(False, **broken), None, None, judge, RETRY)
    assert not r.valid and why in r.why_invalid and judge.asked == []  # not even judged


def test_a_judge_that_cannot_answer_makes_the_rollout_invalid(tmp_path):
    name = f"judge-{tmp_path.name}"
    model = ScriptedModel(["no tag", "still none"], name=name)
    cfg = with_model(behavior_judge=register(model))
    try:
        r = mirl_reward(rollout(False), None, 1.0, LLMBehaviorJudge(LLMClient(cfg, run_dir=tmp_path), tries=2), RETRY)
    finally:
        unregister(name)
    assert not r.valid and "invalid_json" in r.why_invalid and len(model.calls) == 2


def test_the_prefix_length_reaches_the_judge():
    judge = Says(False)
    mirl_reward(rollout(False), 1, 1.0, judge, RETRY)
    assert judge.asked[0][1] is RETRY and judge.asked[0][2] == 1


NO_COMMAND = ErrorType("no runnable command", "Replies with no command that can be run.",
                       provenance="rules: rules:no-runnable-command")


def silent(reward: float = 1.0) -> Trajectory:
    """The failed-command prefix, then two replies with no runnable command (the fence never closed)."""
    steps = [Step(reasoning="", command="make", exit_code=2, output="error", source="prefix")]
    steps += [Step(reasoning="THOUGHT: fix it\n```bash\nvi Make", command=None, raw="THOUGHT: fix it\n```bash\nvi Make")] * 2
    return Trajectory(task="t", seed=0, models={}, instruction="Build it.", steps=steps, prefix_len=1,
                      reward=reward, exit_reason="step_limit")


def test_a_taxonomy_wide_judge_takes_the_reward_of_a_continuation_that_trades_one_misbehavior_for_another():
    """With the prefix's own judge a silent continuation avoids the retry and earns r_o AND r_e; asked about
    the taxonomy's other misbehaviors too, the judges see "no runnable command" and r_e is 0, named in `seen`."""
    judge = RuleBehaviorJudge()
    own = mirl_reward(silent(), None, 1.0, judge, RETRY)
    assert own.r_e and own.reward == 1.0 and own.seen == ()
    wide = mirl_reward(silent(), None, 1.0, judge, RETRY, others=[(judge, NO_COMMAND)])
    assert not wide.r_e and wide.reward == 0.0 and wide.seen == ("no runnable command",)
    assert wide.judge_source == "rules:no-runnable-command" and wide.judged_steps == (1, 2)
    # a continuation that avoids both is paid, and one that repeats names its own misbehavior first
    assert mirl_reward(rollout(repeats=False), None, 1.0, judge, RETRY, others=[(judge, NO_COMMAND)]).reward == 1.0
    both = mirl_reward(rollout(repeats=True), None, 1.0, judge, RETRY, others=[(judge, NO_COMMAND)])
    assert both.seen == ("retries failed command unchanged",) and both.judge_source == "rules:retry-unchanged-after-failure"


def test_every_judge_of_a_taxonomy_wide_reward_is_asked_and_one_that_fails_makes_the_rollout_invalid():
    from mirl.llm.errors import LLMError

    class Fails:
        def judge(self, trajectory, misbehavior, prefix_steps=None):
            raise LLMError("invalid_json", "no verdict tag")

    a, b = Says(False), Says(True)
    r = mirl_reward(rollout(False), None, 1.0, a, RETRY, others=[(b, NO_COMMAND)])
    assert len(a.asked) == len(b.asked) == 1 and r.seen == ("no runnable command",) and r.reward == 0.0
    bad = mirl_reward(rollout(False), None, 1.0, Says(False), RETRY, others=[(Fails(), NO_COMMAND)])
    assert not bad.valid and "'no runnable command'" in bad.why_invalid
