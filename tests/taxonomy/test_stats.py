"""Coverage statistics on hand-computed cases, kappa on a textbook example, the keep threshold."""

from __future__ import annotations

import math

import pytest

from mirl.records.error_step import ErrorStep
from mirl.records.taxonomy import ErrorType, Label, Taxonomy
from mirl.taxonomy import stats


def steps():
    # 5 error steps in 3 environments
    return [ErrorStep(env=e, seed=0, step=i, rejected_command="x", reason="r")
            for i, e in enumerate(["a", "a", "b", "c", "c"])]


def labels(ids):
    types = [["A"], ["A", "B"], ["B"], [], ["C"]]
    return [Label(id=i, types=t, unassigned=None if t else "one_off") for i, t in zip(ids, types)]


def test_shares_env_shares_and_union_coverage_by_hand():
    s = steps()
    ids = [x.id for x in s]
    tax = Taxonomy(types=[ErrorType("A", "a"), ErrorType("B", "b"), ErrorType("C", "c"), ErrorType("D", "d")])
    table = stats.type_stats(tax, labels(ids), s).set_index("type")
    assert table.loc["A", "steps"] == 2 and table.loc["A", "share"] == pytest.approx(2 / 5)
    assert table.loc["A", "envs"] == 1 and table.loc["A", "env_share"] == pytest.approx(1 / 3)
    assert table.loc["B", "envs"] == 2 and table.loc["B", "env_share"] == pytest.approx(2 / 3)
    assert table.loc["D", "steps"] == 0
    # A and B each cover 2 of 5 steps but share one: the union is 3/5, not 4/5
    assert stats.union_coverage(labels(ids), ["A", "B"], 5) == pytest.approx(3 / 5)
    assert stats.union_coverage(labels(ids), ["A", "B", "C"], 5) == pytest.approx(4 / 5)


def test_threshold_keeps_frequent_types_and_leaves_pinned_ones():
    s = steps()
    tax = Taxonomy(types=[ErrorType("A", "a"), ErrorType("C", "c"), ErrorType("B", "b", status="long_tail", pinned=True)])
    table = stats.type_stats(tax, labels([x.id for x in s]), s)
    stats.apply_threshold(tax, table, 0.3)  # A: 0.4 kept, C: 0.2 long tail
    assert [(t.name, t.status) for t in tax.types] == [("A", "kept"), ("C", "long_tail"), ("B", "long_tail")]
    t2 = stats.table2(stats.type_stats(tax, labels([x.id for x in s]), s), labels([x.id for x in s]), 5)
    assert list(t2["type"]) == ["A", "union of kept types"] and t2["share"].iloc[-1] == pytest.approx(2 / 5)


def test_kappa_textbook_example():
    # Wikipedia's example: 50 items, both yes 20, A-yes-B-no 5, A-no-B-yes 10, both no 15 -> kappa 0.4
    a = [1] * 20 + [1] * 5 + [0] * 10 + [0] * 15
    b = [1] * 20 + [0] * 5 + [1] * 10 + [0] * 15
    assert stats.cohen_kappa(a, b) == pytest.approx(0.4)
    assert stats.cohen_kappa(a, a) == pytest.approx(1.0)
    assert math.isnan(stats.cohen_kappa([1, 1], [1, 1]))
    with pytest.raises(ValueError):
        stats.cohen_kappa([1], [1, 0])


def test_rule_agreement_matches_a_type_with_its_detector():
    s = [ErrorStep(env="e", seed=0, step=i, rejected_command="x", reason="r",
                   detectors=["rules:no-runnable-command"] if i < 3 else ["rules:broad-kill"]) for i in range(6)]
    tax = Taxonomy(types=[ErrorType("no command given", "d", provenance="llm"),
                          ErrorType("no runnable command", "d", provenance="rules: rules:no-runnable-command")])
    lab = [Label(id=x.id, types=["no command given"] if i < 3 else []) for i, x in enumerate(s)]
    table = stats.rule_agreement(lab, s, tax)
    assert set(table["type"]) == {"no command given"}  # rule-made types are not compared with themselves
    k = dict(zip(table["detector"], table["kappa"]))
    assert k["rules:no-runnable-command"] == pytest.approx(1.0) and k["rules:broad-kill"] == pytest.approx(-1.0)
