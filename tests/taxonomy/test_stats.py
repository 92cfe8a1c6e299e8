"""Coverage statistics on hand-computed cases, kappa on a textbook example, the keep threshold."""

from __future__ import annotations

import math

import pytest

from mirl.evaluate.stats.agreement import cohens_kappa
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
    t2 = stats.table2(stats.type_stats(tax, labels([x.id for x in s]), s), labels([x.id for x in s]), s)
    assert list(t2["type"]) == ["A", "union of kept types"] and t2["share"].iloc[-1] == pytest.approx(2 / 5)


def test_env_shares_are_of_every_profiled_environment_and_the_union_is_counted_once():
    """Table 2's Envs column: the share of the profiled environments (here 10, of which 3 have error
    steps), and the union row's environments with at least one kept type (A in a, B in a and b: 2)."""
    s = steps()
    ids = [x.id for x in s]
    tax = Taxonomy(types=[ErrorType("A", "a"), ErrorType("B", "b"), ErrorType("C", "c")])
    table = stats.type_stats(tax, labels(ids), s, profiled_envs=10).set_index("type")
    assert table.loc["B", "env_share"] == pytest.approx(2 / 10) and table.loc["A", "env_share"] == pytest.approx(1 / 10)
    stats.apply_threshold(tax, table.reset_index(), 0.3)  # A 0.4, B 0.4 kept; C 0.2 long tail
    t2 = stats.table2(stats.type_stats(tax, labels(ids), s, 10), labels(ids), s, profiled_envs=10)
    union = t2.iloc[-1]
    assert union["share"] == pytest.approx(3 / 5) and union["env_share"] == pytest.approx(2 / 10)
    assert t2.attrs == {"environments": 10, "of": "profiled environments"}
    assert stats.union_env_coverage(labels(ids), ["A", "B"], s) == pytest.approx(2 / 3)  # unknown: of the 3 with errors
    with pytest.raises(ValueError, match="2 profiled environment"):
        stats.type_stats(tax, labels(ids), s, profiled_envs=2)


def test_figure4_has_a_panel_of_steps_and_one_of_environments():
    s = steps()
    tax = Taxonomy(types=[ErrorType("A", "a"), ErrorType("B", "b")])
    table = stats.type_stats(tax, labels([x.id for x in s]), s, profiled_envs=4)
    stats.apply_threshold(tax, table, 0.1)
    left, right = stats.figure4(stats.type_stats(tax, labels([x.id for x in s]), s, 4), 0.1).axes[:2]
    assert sorted(round(p.get_width(), 4) for p in left.patches if p.get_width()) == [0.4, 0.4]
    assert sorted(round(p.get_width(), 4) for p in right.patches if p.get_width()) == [0.25, 0.5]


def test_kappa_textbook_example():
    # Wikipedia's example: 50 items, both yes 20, A-yes-B-no 5, A-no-B-yes 10, both no 15 -> kappa 0.4
    a = [1] * 20 + [1] * 5 + [0] * 10 + [0] * 15
    b = [1] * 20 + [0] * 5 + [1] * 10 + [0] * 15
    assert cohens_kappa(a, b) == pytest.approx(0.4)
    assert cohens_kappa(a, a) == pytest.approx(1.0)
    assert math.isnan(cohens_kappa([1, 1], [1, 1]))  # the kit's one convention, as the judges' table
    with pytest.raises(ValueError):
        cohens_kappa([1], [1, 0])


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
