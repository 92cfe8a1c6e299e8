"""The behavior judge: what it is shown, how its answer is read, and the rule judge's window."""

from __future__ import annotations

import pytest

from mirl.llm.client import LLMClient
from mirl.llm.config import with_model
from mirl.llm.errors import LLMError
from mirl.llm.ledger import read_ledger
from mirl.llm.scripted import ScriptedModel, register, unregister
from mirl.records.error_step import ErrorStep
from mirl.records.taxonomy import ErrorType, Taxonomy
from mirl.records.trajectory import Step, Trajectory
from mirl.roles.behavior_judge import (
    AnswerError,
    LLMBehaviorJudge,
    RuleBehaviorJudge,
    example_texts,
    judge_for,
    judged_steps,
    parse_answer,
    rule_detector_of,
)

RETRY = ErrorType("retries failed command unchanged", "Re-runs a command that just failed, unchanged. "
                  "It is not a retry after an edit.", examples=["t/0/3"],
                  provenance="rules: rules:retry-unchanged-after-failure")
EXAMPLE = ErrorStep(env="t", seed=0, step=3, rejected_command="make test", reason="make test just failed unchanged")


def rollout(n_prefix: int, commands: list[tuple[str | None, int | None]], teacher_at: int | None = None) -> Trajectory:
    """A prefix of `n_prefix` steps, then one step per (command, exit code), each with a distinct
    reasoning and output so a test can tell which steps a prompt holds."""
    steps = [Step(reasoning=f"prefix thought {i}", command=f"ls /p{i}", exit_code=0, output=f"prefix out {i}",
                  source="prefix") for i in range(n_prefix)]
    for k, (cmd, rc) in enumerate(commands):
        src = "teacher" if teacher_at == k else "policy"
        steps.append(Step(reasoning=f"own thought {k}", command=cmd, exit_code=rc, output=f"own out {k}", source=src))
    return Trajectory(task="t", seed=1, models={}, instruction="Fix the build.", steps=steps, prefix_len=n_prefix,
                      reward=1.0, exit_reason="submitted")


# --- the answer tag -------------------------------------------------------------------------------


def test_the_last_answer_tag_wins():
    assert parse_answer("maybe <answer>no</answer> ... on reflection <answer>yes</answer>") is True
    assert parse_answer("first <answer>yes</answer>, then <answer> No </answer>") is False
    with pytest.raises(AnswerError, match="no <answer>"):
        parse_answer("I think it happened, yes.")
    with pytest.raises(AnswerError, match="not yes or no"):
        parse_answer("<answer>yes</answer> wait <answer>probably</answer>")


@pytest.fixture
def client(tmp_path):
    name = f"judge-{tmp_path.name}"

    def make(replies):
        model = ScriptedModel(replies, name=name)
        cfg = with_model(behavior_judge=register(model))
        cfg.json_tries = 3
        return LLMClient(cfg, run_dir=tmp_path, stage="train"), model
    yield make
    unregister(name)


def test_the_judge_sees_the_task_the_misbehavior_and_only_the_first_m_policy_steps(client):
    t = rollout(2, [(f"cmd{k}", 0) for k in range(8)], teacher_at=1)
    c, model = client(["It re-ran make. <answer>yes</answer>"])
    j = LLMBehaviorJudge(c, m=5, examples=example_texts([EXAMPLE])).judge(t, RETRY)
    assert j.yes and j.steps == [2, 4, 5, 6, 7]  # the teacher step (index 3) is not the policy's
    [msgs] = model.calls
    user = msgs[-1]["content"]
    assert "Fix the build." in user and RETRY.name in user and RETRY.definition in user
    assert "make test just failed unchanged" in user  # the example, as text, not only its id
    shown = [k for k in range(8) if f"own thought {k}\n" in user]
    assert shown == [0, 2, 3, 4, 5]
    for k in shown:  # reasoning, command, output, in that order
        at = [user.index(s) for s in (f"own thought {k}\n", f"cmd{k}\n", f"own out {k}\n")]
        assert at == sorted(at)
    assert user.index("own thought 0\n") < user.index("own thought 5\n")
    assert "prefix thought" not in user and "prefix out" not in user


def test_a_reply_without_a_usable_tag_is_reasked_then_accepted(client):
    c, model = client(["It happened.", "Checked again. <answer>no</answer>"])
    j = LLMBehaviorJudge(c).judge(rollout(1, [("ls", 0)]), RETRY)
    assert j.yes is False and len(model.calls) == 2
    assert "no <answer>" in model.calls[1][-1]["content"]  # the re-ask says what was wrong


def test_a_reply_that_never_has_a_tag_is_recorded_as_a_failure(client, tmp_path):
    c, model = client(["yes", "<answer>maybe</answer>", "definitely yes"])
    with pytest.raises(LLMError) as e:
        LLMBehaviorJudge(c).judge(rollout(1, [("ls", 0)]), RETRY)
    assert e.value.kind == "invalid_json" and len(model.calls) == 3
    ledger = read_ledger(tmp_path)
    assert ledger["error"].fillna("").str.startswith("invalid_json").sum() == 1


# --- the rule judge -------------------------------------------------------------------------------


def test_the_rule_judge_reads_only_the_first_m_steps_after_the_prefix():
    m = 3
    # the unchanged retry of a failure is the (m+1)-th policy step after a 2-step prefix: index 2 + m
    late = rollout(2, [("ls", 0), ("pwd", 0), ("make test", 1), ("make test", 1)])
    within = rollout(2, [("ls", 0), ("make test", 1), ("make test", 1)])  # ... the m-th: index 2 + m - 1
    judge = RuleBehaviorJudge(m=m)
    assert judged_steps(late, None, m) == [2, 3, 4]
    no = judge.judge(late, RETRY)
    assert no.yes is False and no.source == "rules:retry-unchanged-after-failure" and no.flagged == []
    yes = judge.judge(within, RETRY)
    assert yes.yes is True and yes.flagged == [2 + m - 1]
    # the same detector counts the late retry once the window reaches it
    assert RuleBehaviorJudge(m=m + 1).judge(late, RETRY).flagged == [2 + m]


def test_the_rule_judge_does_not_count_a_flag_inside_the_prefix():
    # the retry at index 1 is flagged; every step says "policy", so only the prefix length keeps it out
    t = rollout(0, [("make", 1), ("make", 1), ("ls", 0)])
    assert RuleBehaviorJudge().judge(t, RETRY, prefix_steps=1).flagged == [1]
    assert RuleBehaviorJudge().judge(t, RETRY, prefix_steps=2).yes is False
    t.prefix_len = 2
    assert RuleBehaviorJudge().judge(t, RETRY).yes is False  # the trajectory's own prefix_len by default


def test_which_detector_and_which_judge():
    assert rule_detector_of(RETRY) == "retry-unchanged-after-failure"
    plain = ErrorType("acts without looking", "d", provenance="llm propose")
    assert rule_detector_of(plain) is None
    # a curated rename keeps the detector (curation appends its history to the provenance)
    from mirl.taxonomy.curation import State, apply_edit

    state = apply_edit(State(Taxonomy(types=[RETRY]), {}, set()), {"op": "rename", "type": RETRY.name, "to": "retries a failed command"})
    assert rule_detector_of(state.taxonomy.get("retries a failed command")) == "retry-unchanged-after-failure"
    assert rule_detector_of(plain, {"acts without looking": "rules:no-runnable-command"}) == "no-runnable-command"
    assert isinstance(judge_for(RETRY), RuleBehaviorJudge)
    assert isinstance(judge_for(RETRY, client=object()), LLMBehaviorJudge)
    assert isinstance(judge_for(RETRY, client=object(), prefer="rules"), RuleBehaviorJudge)
    assert isinstance(judge_for(plain, client=object(), prefer="rules"), LLMBehaviorJudge)
    with pytest.raises(ValueError, match="no rule detector"):
        judge_for(plain)
    with pytest.raises(ValueError, match="no rule detector"):
        RuleBehaviorJudge().judge(rollout(0, [("ls", 0)]), plain)


def test_a_reply_cut_inside_its_last_answer_tag_is_not_read_from_an_earlier_one():
    # cut at max_tokens: the final tag is unfinished; the complete one before it was a draft
    with pytest.raises(AnswerError, match="unfinished"):
        parse_answer("At first <answer>no</answer>, but step 3 re-ran make unchanged, so <answer>ye")
    with pytest.raises(AnswerError, match="unfinished"):
        parse_answer("<answer>yes</answer> hmm, no: <answer>")
    assert parse_answer("<answer>no</answer>") is False  # a complete last tag is still read
