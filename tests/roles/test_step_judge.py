"""The PivotRL step-equivalence judge: difflib's threshold at its boundary, and the LLM judge over HTTP."""

from __future__ import annotations

import pytest

from mirl.llm.errors import LLMError
from mirl.records.trajectory import Step
from mirl.roles.step_judge import DifflibStepJudge, LLMStepJudge, command_ratio

REF = "x" * 20


def step(command: str | None, reasoning: str = "") -> Step:
    return Step(reasoning=reasoning, command=command)


def test_the_threshold_is_inclusive_at_095():
    # SequenceMatcher ratio = 2 * matches / (len a + len b): 2 * 19 / 40 = 0.95 and 2 * 18 / 40 = 0.90
    assert command_ratio("x" * 19 + "y", REF) == 0.95
    judge = DifflibStepJudge()
    assert judge.same([], step(REF), step("x" * 19 + "y")) is True
    assert judge.same([], step(REF), step("x" * 18 + "yy")) is False
    assert DifflibStepJudge(threshold=0.951).same([], step(REF), step("x" * 19 + "y")) is False


def test_whitespace_is_normalized_before_comparing():
    # unnormalized, "  ls   -la\n" against "ls -la" is 2 * 6 / 17 = 0.71 and would not match
    assert DifflibStepJudge().same([], step("ls -la"), step("  ls   -la\n")) is True
    assert DifflibStepJudge().same([], step("ls -la"), step("ls -l")) is False  # 2 * 5 / 11 = 0.909


def test_a_long_command_is_compared_in_full():
    """Past 200 characters difflib's junk heuristic drops every character seen more than 1% of the
    time; here that leaves nothing to anchor a match after the one changed letter (ratio 0.55)."""
    paths = ["/app/logs/app.log"] * 20
    reference = "cat " + " ".join(paths)
    action = "cat " + " ".join(paths[:10] + ["/app/logs/app.lg"] + paths[11:])
    assert len(reference) > 200
    assert DifflibStepJudge().same([], step(reference), step(action)) is True  # 2 * 362 / 725 = 0.9986
    assert command_ratio(action, reference) == pytest.approx(2 * 362 / 725)


def test_no_command_never_matches():
    assert DifflibStepJudge().same([], step("ls"), step(None)) is False
    assert DifflibStepJudge().same([], step(None), step(None)) is False
    with pytest.raises(ValueError, match="threshold"):
        DifflibStepJudge(threshold=0)


def test_the_llm_judge_sees_history_reference_and_candidate(http_role):
    client, requests = http_role("step_judge", ["Same effect. <answer>yes</answer>"])
    history = [Step(reasoning="look", command="ls /app", output="data.txt", exit_code=0)]
    yes = LLMStepJudge(client).same(history, step("wc -l < /app/data.txt", "count"), step("wc -l /app/data.txt | cut -d' ' -f1"))
    assert yes is True
    user = requests[0]["messages"][-1]["content"]
    history_at, ref_at, cand_at = (user.index(s) for s in ("ls /app", "wc -l < /app/data.txt", "cut -d' ' -f1"))
    assert history_at < ref_at < cand_at and "data.txt\n" in user


def test_the_llm_judge_reasks_a_missing_tag_and_fails_after_three_asks(http_role):
    client, requests = http_role("step_judge", ["They differ.", "<answer>no</answer>"])
    assert LLMStepJudge(client).same([], step("ls"), step("pwd")) is False
    assert len(requests) == 2 and "no <answer>" in requests[1]["messages"][-1]["content"]
    client, requests = http_role("step_judge", ["<answer>perhaps</answer>"])
    with pytest.raises(LLMError) as e:
        LLMStepJudge(client).same([], step("ls"), step("pwd"))
    assert e.value.kind == "invalid_json" and len(requests) == 3


def test_the_llm_judge_is_not_asked_about_an_action_without_a_command(http_role):
    client, requests = http_role("step_judge", ["<answer>yes</answer>"])
    assert LLMStepJudge(client).same([], step("ls"), step(None)) is False
    assert requests == []


class CountingJudge:
    """An LLM judge stand-in that says `answer` and counts how often it was asked."""

    def __init__(self, answer: bool):
        self.answer, self.asked = answer, 0

    def same(self, context_steps, reference_step, action):
        self.asked += 1
        return self.answer


def test_match_then_llm_asks_the_llm_only_below_the_threshold():
    from mirl.roles.step_judge import MatchThenLLMStepJudge

    llm = CountingJudge(False)
    judge = MatchThenLLMStepJudge(llm)
    assert judge.same([], step(REF), step("x" * 19 + "y")) is True and llm.asked == 0  # ratio 0.95: a match
    assert judge.same([], step(REF), step("ls")) is False and llm.asked == 1  # below: the LLM decides
    assert MatchThenLLMStepJudge(CountingJudge(True)).same([], step(REF), step("ls")) is True
    assert judge.same([], step(REF), step(None)) is False and llm.asked == 1  # no command: never a match
