"""Cohen's kappa against scikit-learn and a hand table, its degenerate cases, and pairwise agreement
of judges on the continuations they both judged."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from mirl.evaluate.stats.agreement import cohens_kappa, judge_agreement


def test_kappa_of_a_hand_table():
    # agree on 3 of 4; rater a says yes half the time, b a quarter -> p_e = 1/2*1/4 + 1/2*3/4 = 1/2
    assert cohens_kappa([True, True, False, False], [True, False, False, False]) == pytest.approx(0.5)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("labels", [[True, False], ["loop", "ignore", "none"]])
def test_kappa_matches_scikit_learn(seed, labels):
    rng = np.random.default_rng(seed)
    a = [labels[i] for i in rng.integers(0, len(labels), 40)]
    b = [x if rng.random() < 0.6 else labels[i] for x, i in zip(a, rng.integers(0, len(labels), 40))]
    assert cohens_kappa(a, b) == pytest.approx(cohen_kappa_score(a, b))


def test_kappa_degenerate_cases():
    # both raters constant on the same label: p_o = p_e = 1, 0/0, undefined (as scikit-learn's)
    assert math.isnan(cohens_kappa([False] * 5, [False] * 5))
    assert math.isnan(cohens_kappa(["loop"] * 2, ["loop"] * 2))
    # constant on different labels: p_o = 0 and p_e = 0, the formula gives 0 with no special case
    assert cohens_kappa([True] * 3, [False] * 3) == 0.0
    # one rater constant, the other not: p_e = p_o, no agreement beyond chance
    assert cohens_kappa([True] * 4, [True, True, True, False]) == pytest.approx(0.0)


def test_kappa_bad_input():
    with pytest.raises(ValueError, match="no items"):
        cohens_kappa([], [])
    with pytest.raises(ValueError, match="3 labels from one rater but 2"):
        cohens_kappa([True, False, True], [True, False])


def judged(judge, misbehavior, labels, policy="base"):
    """labels: {(prefix_id, sample): repeated}."""
    return [dict(policy=policy, misbehavior=misbehavior, prefix_id=p, sample=s, judge=judge, repeated=r)
            for (p, s), r in labels.items()]


def items(values):
    return {(f"P{i // 2}", i % 2): v for i, v in enumerate(values)}


def test_judges_are_paired_on_the_same_continuations_per_misbehavior():
    a = [True, True, False, False, True, None]
    b = [True, False, False, False, True, True]
    rule = [True, True, False, True, True, False]
    data = (judged("llm-a", "loop", items(a)) + judged("llm-b", "loop", items(b))
            + judged("rules", "loop", items(rule))
            + judged("llm-a", "ignore-error", items([True, False, True, False]))
            + judged("llm-b", "ignore-error", items([True, False, False, False]))
            + judged("rules", "ignore-error", {("Q9", 0): True}))
    table = judge_agreement(data).set_index(["misbehavior", "judge_a", "judge_b"])
    # for "ignore-error" the rule detector judged none of the continuations the LLM judges did: no rules pair
    assert sorted(table.index) == [("ignore-error", "llm-a", "llm-b"), ("loop", "llm-a", "llm-b"),
                                   ("loop", "llm-a", "rules"), ("loop", "llm-b", "rules")]
    row = table.loc[("loop", "llm-a", "llm-b")]
    # llm-a failed on the last continuation: it is left out of the pair and counted
    assert (row.n_items, row.n_excluded) == (5, 1)
    assert row.kappa == pytest.approx(cohen_kappa_score(a[:5], b[:5]))
    assert row.agreement == pytest.approx(4 / 5)
    assert table.loc[("loop", "llm-b", "rules"), "kappa"] == pytest.approx(cohen_kappa_score(b, rule))
    assert table.loc[("ignore-error", "llm-a", "llm-b"), "kappa"] == pytest.approx(0.5)


def test_a_continuation_is_keyed_by_policy_too():
    # same prefix and sample index under two policies are different continuations
    data = (judged("a", "loop", {("P1", 0): True}, policy="base") + judged("a", "loop", {("P1", 0): False}, policy="rl")
            + judged("b", "loop", {("P1", 0): True}, policy="base") + judged("b", "loop", {("P1", 0): False}, policy="rl"))
    row = judge_agreement(data).iloc[0]
    assert (row.n_items, row.agreement, row.kappa) == (2, 1.0, 1.0)
    per_policy = judge_agreement(data, by=("policy", "misbehavior"))
    assert list(per_policy.policy) == ["base", "rl"] and list(per_policy.n_items) == [1, 1]
    # one item per policy: both judges constant on it, agreement 1 but kappa undefined
    assert list(per_policy.agreement) == [1.0, 1.0] and per_policy.kappa.isna().all()


def test_a_pair_with_every_shared_item_failed_has_no_kappa():
    data = judged("a", "loop", {("P1", 0): None}) + judged("b", "loop", {("P1", 0): True})
    row = judge_agreement(data).iloc[0]
    assert (row.n_items, row.n_excluded) == (0, 1) and math.isnan(row.kappa)


def test_agreement_bad_input():
    one = judged("a", "loop", {("P1", 0): True})
    with pytest.raises(ValueError, match="labelled continuation .* more than once"):
        judge_agreement(one + one)
    with pytest.raises(ValueError, match="sample 0: no field 'sample'"):
        judge_agreement([{k: v for k, v in one[0].items() if k != "sample"}])
    with pytest.raises(ValueError, match="groups must be among"):
        judge_agreement(one, by=("judge",))
