"""The paper's reported numbers: read and checked from params/paper_reported.yaml, redrawn, a run beside them."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd
import pytest
import yaml

from mirl import reported
from mirl.config import ParamsError


def test_bundled_file_holds_the_papers_numbers_and_names_the_rest():
    r = reported.read()
    assert r["figure3c"] == {"sampled": 640.0, "kept": 219.0}
    assert r["figure7"]["relative_reduction"] == {"low": 0.43, "high": 0.57}
    assert r["figure9"]["recipes"]["MiRL"]["total"]["gpu_hours"] == 202.8
    assert set(r["not_transcribed"]) | {"figure3c", "figure7", "figure9"} == set(reported.FIGURES)


def test_funnel_figure_draws_the_papers_share_then_the_runs():
    funnel = pd.DataFrame([{"misbehavior": "a", "sampled": 4, "exact": 1}, {"misbehavior": "b", "sampled": 6, "exact": 3},
                           {"misbehavior": "all", "sampled": 10, "exact": 4}])
    fig = reported.funnel_beside(funnel, reported.read())
    ax = fig.axes[0]
    widths = [round(p.get_width(), 4) for p in ax.patches]
    assert widths == [round(219 / 640, 4), 0.25, 0.5, 0.4]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["paper (all)", "run: a", "run: b", "run (all)"]


def test_reduction_figure_puts_each_misbehaviors_reduction_over_the_papers_band():
    rates = pd.DataFrame([
        {"policy": "base", "judge": "rules", "misbehavior": "m1", "rate": 0.5},
        {"policy": "base", "judge": "rules", "misbehavior": "m2", "rate": 0.4},
        {"policy": "base", "judge": "rules", "misbehavior": "m3", "rate": 0.0},  # no base rate: no reduction
        {"policy": "mirl", "judge": "rules", "misbehavior": "m1", "rate": 0.25},
        {"policy": "mirl", "judge": "rules", "misbehavior": "m2", "rate": 0.5},
        {"policy": "mirl", "judge": "rules", "misbehavior": "m3", "rate": 0.1},
    ])
    red = reported.reductions(rates, "base", "mirl")
    assert red.set_index("misbehavior")["reduction"].round(6).to_dict() == {"m1": 0.5, "m2": -0.25}
    fig = reported.reduction_figure(red, reported.read())
    ax = fig.axes[0]
    band = [p for p in ax.patches if p.get_label().startswith("paper")]
    assert len(band) == 1
    y0, y1 = band[0].get_y(), band[0].get_y() + band[0].get_height()  # data units on y
    assert (y0, y1) == (pytest.approx(0.43), pytest.approx(0.57))
    bars = [round(p.get_height(), 6) for p in ax.patches if p not in band]
    assert bars == [0.5, -0.25]


def _write(tmp_path, data) -> str:
    p = tmp_path / "reported.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(p)


BASE = {"figure3c": {"sampled": 10, "kept": 3}, "figure7": {"relative_reduction": {"low": 0.1, "high": 0.2}},
        "not_transcribed": {f: "no values" for f in reported.FIGURES if f not in ("figure3c", "figure7")}}


@pytest.mark.parametrize("change, message", [
    ({"figure13": 1}, "unknown key(s) figure13"),
    ({"figure3c": {"sampled": 10, "kept": 11}}, "figure3c.kept (11) is more than"),
    ({"figure3c": {"sampled": "many", "kept": 1}}, "figure3c.sampled must be a number"),
    ({"figure7": {"relative_reduction": {"low": 0.5, "high": 0.2}}}, "figure7.relative_reduction.high = 0.2 is outside"),
    ({"figure7": {"relative_reduction": {"low": 0.1}}}, "figure7.relative_reduction needs exactly high, low"),
    ({"not_transcribed": {"figure4": ""}}, "not_transcribed maps figure names to the reason"),
    ({"figure4": 1}, "figure4 both given and listed as not transcribed"),
])
def test_bad_files_get_an_error_naming_the_file_and_the_key(tmp_path, change, message):
    data = {**BASE, **change}
    path = _write(tmp_path, data)
    with pytest.raises(ParamsError) as e:
        reported.read(path)
    assert path in str(e.value) and message in str(e.value)


def test_a_figure_neither_given_nor_excused_is_an_error(tmp_path):
    data = {**BASE, "not_transcribed": {k: v for k, v in BASE["not_transcribed"].items() if k != "figure12"}}
    with pytest.raises(ParamsError, match="say for figure12 either its values or why not"):
        reported.read(_write(tmp_path, data))


def test_values_for_a_figure_the_kit_does_not_draw_are_refused_not_ignored(tmp_path):
    data = {**BASE, "figure11": {"values": [0.1]},
            "not_transcribed": {k: v for k, v in BASE["not_transcribed"].items() if k != "figure11"}}
    with pytest.raises(ParamsError, match="values for figure11 are not drawn by the kit"):
        reported.read(_write(tmp_path, data))


# Values a user transcribes for the figures the bundled file cannot hold: made up here, for the test only.
GIVEN = {"figure4": {"shares": {"retry unchanged": 0.31, "no verification": 0.12}},
         "table2": {"rows": [{"type": "retry unchanged", "share": 0.31, "definition": "same command again"}]},
         "figure5": {"scores": {"TMax": {"mean": 0.40, "se": 0.02}, "MiRL": {"mean": 0.45, "se": 0.03}}},
         "figure8a": {"pass_at_k": {"MiRL": {1: 0.45, 2: 0.55, 4: 0.62}}},
         "figure12": {"se": {2: 0.03, 4: 0.02, 8: 0.014}}}


def given(tmp_path) -> dict:
    data = {**BASE, **GIVEN, "not_transcribed": {"figure9": "x", "figure11": "y"}}
    return reported.read(_write(tmp_path, data))


def test_given_values_are_read_checked_and_listed_as_present(tmp_path):
    r = given(tmp_path)
    assert r["figure8a"]["pass_at_k"]["MiRL"] == {1: 0.45, 2: 0.55, 4: 0.62}
    assert r["figure12"]["se"] == {2: 0.03, 4: 0.02, 8: 0.014}
    assert reported.absent(r, "figure4", "figure11") == "figure11: not drawn from the paper: y"


def test_figure4_and_5_draw_the_given_values_then_the_runs(tmp_path):
    r = given(tmp_path)
    types = pd.DataFrame([{"type": "no runnable command", "share": 0.76}])
    ax = reported.shares_beside(types, r).axes[0]
    assert [round(b.get_width(), 4) for b in ax.patches] == [0.31, 0.12, 0.76]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["paper: retry unchanged", "paper: no verification",
                                                           "run: no runnable command"]
    scores = pd.DataFrame([{"policy": "base", "run_mean": 0.1, "run_se": 0.05}])
    ax = reported.scores_beside(scores, r, {"base": "SmolLM2"}).axes[0]
    assert [round(b.get_width(), 4) for b in ax.patches] == [0.40, 0.45, 0.1]
    assert ax.get_yticklabels()[-1].get_text() == "run: SmolLM2"
    t2 = reported.table2_beside(pd.DataFrame([{"type": "a", "share": 0.5, "definition": "d", "env_share": 1.0}]), r)
    assert t2[["source", "type", "share"]].values.tolist() == [["paper", "retry unchanged", 0.31], ["run", "a", 0.5]]


def test_figure8a_and_12_draw_the_given_curves_beside_the_runs(tmp_path):
    r = given(tmp_path)
    passk = pd.DataFrame([{"policy": "base", "k": k, "mean": m} for k, m in [(2, 0.2), (1, 0.1)]])
    lines = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata()))
             for ln in reported.passk_beside(passk, r).axes[0].get_lines()}
    assert lines == {"paper: MiRL": ([1, 2, 4], [0.45, 0.55, 0.62]), "run: base": ([1, 2], [0.1, 0.2])}
    curves = pd.DataFrame([{"policy": "base", "k": k, "se": se} for k, se in [(2, 0.05), (4, 0.035)]])
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in reported.seed_se_beside(curves, r).axes[0].get_lines()}
    assert lines == {"paper: SE": [0.03, 0.02, 0.014], "run: base": [0.05, 0.035]}


@pytest.mark.parametrize("change, message", [
    ({"figure5": {"scores": {"MiRL": {"mean": 45, "se": 1}}}}, "figure5.scores.MiRL.mean = 45 is outside [0, 1]"),
    ({"figure8a": {"pass_at_k": {"MiRL": {0: 0.4}}}}, "figure8a.pass_at_k.MiRL is keyed by k = 1, 2, ...; got '0'"),
    ({"table2": {"rows": [{"type": "a"}]}}, "table2.rows[0] needs type and share"),
    ({"figure4": {"shares": {}}}, "figure4.shares must be a non-empty mapping"),
])
def test_bad_given_values_name_the_file_and_the_key(tmp_path, change, message):
    data = {**BASE, **GIVEN, **change, "not_transcribed": {"figure9": "x", "figure11": "y"}}
    path = _write(tmp_path, data)
    with pytest.raises(ParamsError) as e:
        reported.read(path)
    assert path in str(e.value) and message in str(e.value)
