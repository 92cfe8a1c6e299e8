"""The RaR+ rubric judge: the score tag, what the LLM judge is shown, the rule judge's arithmetic."""

from __future__ import annotations

import pytest

from mirl.llm.errors import LLMError
from mirl.llm.ledger import read_ledger
from mirl.records.trajectory import Step, Trajectory
from mirl.roles.rubric_judge import LLMRubricJudge, RuleRubricJudge, parse_score
from mirl.roles.rubric_writer import Rubric, RubricItem
from mirl.roles.tagreply import TagError

UNCHECKED = [RubricItem(f"judged by reading only {k}", 4.0, "Important") for k in range(3)]
RUBRIC = Rubric("t", [
    RubricItem("Builds with make", 5.0, "Essential", r"command:\bmake\b"),
    RubricItem("Writes out.txt", 3.0, "Important", r"command:>\s*out\.txt"),
    RubricItem("The output shows PASS", 2.0, "Optional", r"output:^PASS$"),
    RubricItem("Deletes the sources", -2.0, "Pitfall", r"command:\brm\b"),
] + UNCHECKED, 0.8)


def traj(commands: list[tuple[str | None, str]], prefix: int = 0, teacher_at: int | None = None) -> Trajectory:
    steps = [Step(reasoning=f"thought {k}", command=c, output=o, exit_code=0,
                  source="teacher" if k == teacher_at else "prefix" if k < prefix else "policy")
             for k, (c, o) in enumerate(commands)]
    return Trajectory(task="t", seed=0, models={}, instruction="Build the project.", steps=steps, prefix_len=prefix)


# --- the score tag --------------------------------------------------------------------------------


def test_the_last_score_tag_wins_and_must_be_an_integer_from_1_to_10():
    assert parse_score("draft <score>3</score> ... final <score> 8 </score>") == 8
    assert parse_score("<SCORE>10</SCORE>") == 10 and parse_score("<score>1</score>") == 1
    for bad, says in [("I rate it 7.", "no <score>"), ("<score>0</score>", "not an integer from 1 to 10"),
                      ("<score>11</score>", "not an integer"), ("<score>6.5</score>", "not an integer"),
                      ("<score>good</score>", "not a number")]:
        with pytest.raises(TagError, match=says):
            parse_score(bad)


# --- the LLM judge --------------------------------------------------------------------------------


def test_the_judge_sees_the_rubric_and_only_the_agents_own_commands_and_outputs(http_role):
    client, requests = http_role("rubric_judge", ["Mostly there. <score>7</score>"])
    t = traj([("ls", "prefix out"), ("make all", "built"), ("cat notes", "teacher out"), ("echo x > out.txt", ""),
              (None, "format error shown")], prefix=1, teacher_at=2)
    rating = LLMRubricJudge(client).rate(t, RUBRIC, prefix_steps=1)
    assert rating.score == 7 and rating.source == "llm:openai/test-model" and rating.steps == [1, 3, 4]
    assert rating.reason == "Mostly there."
    user = requests[0]["messages"][-1]["content"]
    assert "Build the project." in user and "[Pitfall, weight -2] Deletes the sources" in user
    assert "[Essential, weight 5] Builds with make" in user
    assert "make all" in user and "built" in user and "echo x > out.txt" in user
    assert "### Step 3\n(no runnable command)\nOutput:\nformat error shown" in user and "None" not in user
    assert "prefix out" not in user and "teacher out" not in user  # not the policy's own steps
    assert "thought" not in user  # reasoning earns nothing: only commands and outputs are shown


def test_a_reply_without_a_usable_score_is_reasked_then_accepted(http_role):
    client, requests = http_role("rubric_judge", ["Seven out of ten.", "<score>12</score>", "Checked. <score>4</score>"])
    assert LLMRubricJudge(client).rate(traj([("make", "")]), RUBRIC).score == 4
    assert len(requests) == 3
    assert "no <score>" in requests[1]["messages"][-1]["content"]
    assert "not an integer from 1 to 10" in requests[2]["messages"][-1]["content"]


def test_a_judge_that_never_scores_fails_and_is_recorded(http_role, tmp_path):
    client, requests = http_role("rubric_judge", ["no idea"])
    with pytest.raises(LLMError) as e:
        LLMRubricJudge(client).rate(traj([("make", "")]), RUBRIC)
    assert e.value.kind == "invalid_json" and len(requests) == 3
    assert read_ledger(tmp_path / "run")["error"].fillna("").str.startswith("invalid_json").sum() == 1


# --- the rule judge -------------------------------------------------------------------------------
# checkable positive weight: 5 + 3 + 2 = 10; the unchecked items are left out


@pytest.mark.parametrize("commands,score", [
    ([("make", "PASS"), ("echo 1 > out.txt", "")], 10.0),  # 10/10 met
    ([("make", "built")], 1 + 9 * 5 / 10),  # only the Essential
    ([("make", "PASS"), ("rm -r src", "")], 1 + 9 * (7 - 2) / 10),  # 7 met, the Pitfall (weight -2) costs 2
    ([("echo 1 > out.txt", "PASSED"), ("rm x", "")], 1 + 9 * (3 - 2) / 10),  # "PASSED" is not ^PASS$
    ([("rm x", "")], 1.0),  # 0 - 2 < 0 clips at 1
    ([(None, "PASS")], 1 + 9 * 2 / 10),  # a step without a command still has an output
])
def test_the_rule_score_weighs_met_items_against_pitfalls(commands, score):
    assert RuleRubricJudge().rate(traj(commands), RUBRIC).score == pytest.approx(score)


def test_the_rule_judge_reads_only_the_policy_steps_after_the_prefix():
    t = traj([("make", "PASS"), ("rm -rf build", ""), ("echo 1 > out.txt", "")], prefix=2)
    rating = RuleRubricJudge().rate(t, RUBRIC, prefix_steps=2)
    assert rating.steps == [2] and rating.score == pytest.approx(1 + 9 * 3 / 10)
    assert rating.met == {0: False, 1: True, 2: False, 3: False}
    assert RuleRubricJudge().rate(t, RUBRIC, prefix_steps=0).steps == [2]  # prefix steps are never the policy's
    t.steps[1].source = "policy"
    assert RuleRubricJudge().rate(t, RUBRIC, prefix_steps=1).score == pytest.approx(1 + 9 * (3 - 2) / 10)


def test_a_rubric_without_a_checkable_quality_cannot_be_rated_by_rules():
    only_text = Rubric("t", UNCHECKED + [RubricItem("Deletes data", -2.0, "Pitfall", r"command:\brm\b")] * 4, 0.9)
    with pytest.raises(ValueError, match="no checkable Essential, Important or Optional item"):
        RuleRubricJudge().rate(traj([("make", "")]), only_text)


def test_a_reply_cut_inside_its_last_score_tag_is_not_read_from_an_earlier_one():
    from mirl.roles.tagreply import TagError

    with pytest.raises(TagError, match="unfinished"):
        parse_score("draft <score>9</score> ... the agent deleted the tests, so final <score>2")
    assert parse_score("draft <score>9</score> final <score>2</score>") == 2
