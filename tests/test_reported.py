"""The paper's printed numbers: read and checked from params/paper_reported.yaml, redrawn, a run beside them.

The drawing tests read the values back from the figures' artists (bar widths, line data), so a figure
that drew other numbers than the file holds fails."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd
import pytest
import yaml

from mirl import paper_figures, reported
from mirl.typed import ParamsError

PAPER = reported.read()


def test_the_bundled_file_holds_every_figure_and_excuses_none():
    assert set(reported.FIGURES) <= set(PAPER) and PAPER["not_transcribed"] == {}
    assert PAPER["figure3c"] == {"sampled": 640.0, "kept": 219.0, "environments": 189.0}
    t2 = PAPER["table2"]["rows"].set_index("type")
    assert t2.loc["Kills processes without checking their identities", "envs"] == pytest.approx(0.14)
    assert PAPER["table2"]["union"] == {"steps": pytest.approx(0.521), "envs": pytest.approx(0.754)}
    f5 = PAPER["figure5"]["scores"].set_index(["recipe", "source", "benchmark"])
    assert tuple(f5.loc[("MiRL", "ours", "TB-Lite")]) == (pytest.approx(0.518), pytest.approx(0.001))
    assert tuple(f5.loc[("TMax-4B", "reported", "TB-Lite")]) == (pytest.approx(0.426), pytest.approx(0.015))
    assert PAPER["figure6"]["dead_groups"] == {"TMax-189": pytest.approx(0.273), "+ env. selection": pytest.approx(0.429)}
    assert PAPER["figure10"]["recipes"]["PivotRL"]["total"]["rollouts"] == 133100
    assert PAPER["figure11"]["points"].query("benchmark == 'TB-2.1'")["environments"].tolist() == [47, 94, 189, 378]
    assert PAPER["table4"]["prices"].set_index("model").loc["Qwen3.8-27B", "currency"] == "CNY"


def test_every_printed_number_carries_its_line():
    numbers = reported.printed_numbers(yaml.safe_load(reported.find(reported.DEFAULT).read_text()))
    assert len(numbers) > 150 and all(line > 0 for _, _, line in numbers)
    keys = {k for k, _, _ in numbers}
    assert "figure10.recipes.RaR+.total.api_usd" in keys and "figure7.rows[5].Qwen" in keys


def test_the_papers_43_to_57_percent_is_the_reduction_of_the_mean_rate_per_judge():
    """Recomputed from Figure 7's printed rates: 57% under Gemini and 43% under Qwen, the printed range;
    per misbehavior the reductions run from -29% to +98% (so a band per misbehavior would be wrong)."""
    means = paper_figures.mean_reductions(PAPER)
    assert (round(means["Gemini"], 2), round(means["Qwen"], 2)) == (0.57, 0.43)
    band = PAPER["figure7"]["mean_reduction"]
    assert (band["low"], band["high"]) == (round(means["Qwen"], 2), round(means["Gemini"], 2))
    red = paper_figures.reductions(PAPER["figure7"]["rates"], "Qwen3.5-4B", "MiRL")
    per = red[red["misbehavior"] != paper_figures.MEAN]["reduction"]
    assert (round(per.min(), 2), round(per.max(), 2)) == (-0.29, 0.98)


def _write(tmp_path, data) -> str:
    p = tmp_path / "reported.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(p)


def _bundled() -> dict:
    return yaml.safe_load(reported.find(reported.DEFAULT).read_text())


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(figure13={"x": 1}), "unknown key(s) figure13"),
    (lambda d: d["figure3c"].update(kept={"value": 700, "line": 363}), "figure3c.kept (700) is more than"),
    (lambda d: d["figure5"]["rows"][0].update({"TB-Lite": [31.8]}), "figure5.rows[0].TB-Lite must be [mean, standard error]"),
    (lambda d: d["figure5"]["rows"][0].update(line=None), "figure5.rows[0].TB-Lite = [31.8, 3.8] has no line"),
    (lambda d: d["figure9"]["recipes"]["MiRL"].pop("lines"), "figure9.recipes.MiRL.total.rollouts = 26200 has no line"),
    (lambda d: d["figure7"]["rows"][0].update(Gemini=225), "figure7.rows[0].Gemini = 225 is outside [0, 100]"),
    (lambda d: d.pop("figure11"), "say for figure11 either its values or why not"),
    (lambda d: d.update(not_transcribed={"figure12": "later"}), "figure12 both given and listed as not transcribed"),
    (lambda d: d["figure10"]["recipes"]["MiRL"]["total"].update(rollouts=1), "reports other totals than an earlier figure"),
])
def test_bad_files_get_an_error_naming_the_file_and_the_key(tmp_path, change, message):
    data = _bundled()
    change(data)
    path = _write(tmp_path, data)
    with pytest.raises(ParamsError) as e:
        reported.read(path)
    assert path in str(e.value) and message in str(e.value)


def test_a_figure_left_out_with_a_reason_is_named_not_drawn(tmp_path):
    data = _bundled()
    del data["figure8"]
    data["not_transcribed"] = {"figure8": "not yet read"}
    r = reported.read(_write(tmp_path, data))
    assert "figure8" not in r
    assert reported.absent(r, "figure5", "figure8") == "figure8: not drawn from the paper: not yet read"


# --- drawn beside a run, read back from the figures ---------------------------------------------------


def test_figure4_draws_both_panels_the_paper_prints_then_the_runs():
    run = pd.DataFrame([{"type": "retry unchanged", "share": 0.31, "env_share": 0.6}])
    steps, envs = paper_figures.shares_beside(run, PAPER).axes[:2]
    assert paper_figures.bars_of(steps) == [(f"paper: {t}", s) for t, s in zip(
        PAPER["figure4"]["rows"]["type"], [0.154, 0.115, 0.112, 0.051, 0.047, 0.025, 0.017, 0.014])] + [
        ("run: retry unchanged", 0.31)]
    assert [w for _, w in paper_figures.bars_of(envs)] == [0.467, 0.422, 0.365, 0.194, 0.6]  # the paper prints the top four


def test_table2_puts_the_papers_env_shares_and_union_beside_the_runs():
    run = pd.DataFrame([{"type": "a", "share": 0.5, "env_share": 0.25, "definition": "d"}])
    t = paper_figures.table2_beside(run, PAPER)
    assert t.iloc[8][["type", "share", "env_share"]].tolist() == ["union of kept types", 0.521, 0.754]
    assert t.iloc[-1][["source", "type", "share", "env_share"]].tolist() == ["run", "a", 0.5, 0.25]


@pytest.mark.parametrize("figure", ["figure5", "figure6"])
def test_scores_draw_both_benchmarks_of_the_paper_and_the_run(figure):
    run = pd.DataFrame([{"policy": "base", "run_mean": 0.1, "run_se": 0.05}])
    lite, tb21, mine = paper_figures.scores_beside(run, PAPER, {"base": "SmolLM2"}, figure=figure).axes
    scores = PAPER[figure]["scores"]
    assert [w for _, w in paper_figures.bars_of(tb21)] == [pytest.approx(v) for v in scores[scores["benchmark"] == "TB-2.1"]["mean"]]
    assert paper_figures.bars_of(lite)[-1] == ("MiRL" if figure == "figure5" else "+ r_e (MiRL)", pytest.approx(0.518))
    assert paper_figures.bars_of(mine) == [("run: SmolLM2", 0.1)]


def test_figure7_rates_per_judge_and_the_band_on_the_mean_rate_only():
    rates = pd.DataFrame([
        {"policy": "base", "judge": "rules", "misbehavior": "m1", "rate": 0.5},
        {"policy": "base", "judge": "rules", "misbehavior": "m2", "rate": 0.3},
        {"policy": "base", "judge": "rules", "misbehavior": "m3", "rate": 0.0},   # no base rate: no reduction of its own
        {"policy": "base", "judge": "rules", "misbehavior": "all", "rate": 0.27},  # the pooled row is not a misbehavior
        {"policy": "mirl", "judge": "rules", "misbehavior": "m1", "rate": 0.25},
        {"policy": "mirl", "judge": "rules", "misbehavior": "m2", "rate": 0.45},
        {"policy": "mirl", "judge": "rules", "misbehavior": "m3", "rate": 0.2},
    ])
    red = paper_figures.reductions(rates, "base", "mirl")
    got = red.set_index("misbehavior")["reduction"].round(6).to_dict()
    assert got == {"m1": 0.5, "m2": -0.5, paper_figures.MEAN: round(1 - (0.9 / 3) / (0.8 / 3), 6)}
    fig = paper_figures.reduction_figure(red, PAPER)
    ax = fig.axes[0]
    band = [c for c in ax.collections if c.get_label().startswith("paper")]
    assert len(band) == 1
    (x0, y0), (x1, y1) = band[0].get_paths()[0].get_extents().get_points()
    assert (x0, x1) == (pytest.approx(0.43), pytest.approx(0.57)) and (y0, y1) == (pytest.approx(1.55), pytest.approx(2.45))
    bars = sorted((round(p.get_y() + p.get_height() / 2, 3), round(p.get_width(), 6)) for p in ax.patches)
    assert bars == [(0.0, 0.5), (1.0, -0.5), (2.0, got[paper_figures.MEAN])]
    assert [t.get_text() for t in ax.texts] == ["+50%", "-50%", f"{got[paper_figures.MEAN]:+.0%}"]
    assert_readable(fig)
    panels = paper_figures.rates_beside(rates, PAPER).axes
    assert [a.get_title() for a in panels] == ["paper: Gemini", "paper: Qwen", "run: rules"]
    gemini = dict(paper_figures.bars_of(panels[0]))
    assert gemini["Makes false claims about tests | MiRL"] == pytest.approx(0.081) and len(gemini) == 12
    assert [w for _, w in paper_figures.bars_of(panels[2])] == [0.5, 0.3, 0.25, 0.45, 0.2]  # m3's 0 draws no bar


def test_figure8_paper_end_points_and_run_curves():
    passk = pd.DataFrame([{"policy": "base", "k": k, "mean": m} for k, m in [(2, 0.2), (1, 0.1)]])
    lines = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata()))
             for ln in paper_figures.passk_beside(passk, PAPER).axes[0].get_lines()}
    assert lines == {"paper: MiRL": ([16], [0.393]), "paper: Qwen3.5-4B": ([16], [0.348]),
                     "paper: TMax-4B": ([16], [0.337]), "run: base": ([1, 2], [0.1, 0.2])}
    per_task = pd.DataFrame([{"policy": "base", "task": t, "n": 3, "c": c} for t, c in [("a", 0), ("b", 2), ("c", 3)]])
    solved = paper_figures.solved_beside(per_task, PAPER).set_index("source")
    assert solved.loc["paper", ["tasks", "solved_at_least_once", "never_solved"]].tolist() == [89, 42, 47]
    assert solved.loc["run", ["tasks", "solved_at_least_once", "never_solved"]].tolist() == [3, 2, 1]


def test_figure11_the_papers_points_lines_and_the_runs_trained_policy():
    run = pd.DataFrame([{"policy": "mirl-3", "environments": 3, "mean": 0.4, "se": 0.1}])
    base = pd.DataFrame([{"policy": "SmolLM2", "mean": 0.2}])
    lite, tb21, mine = paper_figures.environments_beside(run, PAPER, base).axes
    data = paper_figures.lines_of(tb21)
    assert data["paper: MiRL"] == ([47, 94, 189, 378], [0.161, 0.191, 0.213, 0.221])
    assert data["paper: TMax-4B"][1] == [0.206, 0.206] and data["paper: Qwen3.5-4B"][1] == [0.161, 0.161]
    assert paper_figures.lines_of(lite)["paper: MiRL"][1] == [0.42, 0.48, 0.518, 0.524]
    assert {k: v[1] for k, v in paper_figures.lines_of(mine).items()} == {"run: trained policies": [0.4], "run: SmolLM2": [0.2, 0.2]}


def test_figure12_se_against_seeds_and_the_16_seed_scores():
    curves = pd.DataFrame([{"policy": "base", "k": k, "se": se} for k, se in [(2, 0.05), (4, 0.035)]])
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in paper_figures.seed_se_beside(curves, PAPER).axes[0].get_lines()}
    assert lines["paper: mean SE"] == [0.014, 0.0116, 0.0087, 0.0062] and lines["run: base"] == [0.05, 0.035]
    assert lines["paper: ~ 1/sqrt(k)"] == pytest.approx([0.014, 0.014 / 2 ** 0.5, 0.014 / 2, 0.014 / 8 ** 0.5])
    scores = pd.DataFrame([{"policy": "base", "n_runs": 4, "run_mean": 0.3, "run_se": 0.02}])
    t = paper_figures.seed_scores_beside(scores, PAPER)
    assert t[t["recipe"] == "MiRL"][["over", "mean"]].values.tolist() == [["runs_3", 0.213], ["seeds_16", 0.2114]]
    assert t.iloc[-1].tolist() == ["run", "base", "runs_4", 0.3, 0.02]


def test_funnel_and_prices_beside_the_run():
    funnel = pd.DataFrame([{"misbehavior": "a", "sampled": 4, "exact": 1}, {"misbehavior": "all", "sampled": 4, "exact": 1}])
    ax = paper_figures.funnel_beside(funnel, PAPER).axes[0]
    assert [round(p.get_width(), 4) for p in ax.patches] == [round(219 / 640, 4), 0.25, 0.25]
    prices = paper_figures.prices_beside({"local/x": {"input": 1.0, "output": 2.0}}, PAPER)
    assert prices.iloc[-1][["source", "model", "cached_input"]].tolist() == ["run", "local/x", 1.0]
    assert prices[prices["model"] == "Claude Opus 5"]["output"].item() == 25


def assert_readable(fig) -> None:
    """No two texts of the figure overlap (tick labels, axis labels, titles, values written on it), and
    a legend takes less room than the data it explains."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    texts = list(fig.texts)
    for ax in fig.axes:
        (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
        ticks = [t for t in ax.get_xticklabels() if x0 - 1e-9 <= t.get_position()[0] <= x1 + 1e-9]  # drawn ones
        ticks += [t for t in ax.get_yticklabels() if y0 - 1e-9 <= t.get_position()[1] <= y1 + 1e-9]
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ticks, *ax.texts]
    for legend in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]:
        texts += [legend.get_title(), *legend.get_texts()]
    boxes = [(t.get_text(), t.get_window_extent(r)) for t in texts if t.get_visible() and t.get_text().strip()]
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1:]:
            assert not ba.overlaps(bb), f"{a!r} overlaps {b!r}"
    area = sum(ax.get_window_extent(r).width * ax.get_window_extent(r).height for ax in fig.axes if ax.axison)
    for legend in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]:
        box = legend.get_window_extent(r)
        assert box.width * box.height < 0.5 * area, "the legend is larger than the data"


def test_an_empty_reduction_figure_says_what_is_missing():
    fig = paper_figures.reduction_figure(paper_figures.reductions_against(pd.DataFrame(
        [{"policy": "base", "judge": "rules", "misbehavior": "m", "rate": 0.4}]), "base"), PAPER)
    assert any("no trained policy" in t.get_text() for t in fig.axes[0].texts)


def test_every_policy_is_compared_with_the_base_and_dead_groups_sit_beside_the_papers():
    rates = pd.DataFrame([{"policy": p, "judge": "rules", "misbehavior": "m", "rate": r}
                          for p, r in [("base", 0.4), ("a", 0.2), ("b", 0.6)]])
    red = paper_figures.reductions_against(rates, "base", {"a": "MiRL"})
    got = {(p, m): round(x, 6) for p, m, x in zip(red["policy"], red["misbehavior"], red["reduction"])}
    assert got == {("MiRL", "m"): 0.5, ("MiRL", paper_figures.MEAN): 0.5, ("b", "m"): -0.5, ("b", paper_figures.MEAN): -0.5}
    fig = paper_figures.reduction_figure(red, PAPER)
    assert [a.get_title() for a in fig.axes] == ["MiRL vs base, judge: rules", "b vs base, judge: rules"]
    assert_readable(fig)
    assert paper_figures.reductions_against(rates[rates["policy"] == "base"], "base").empty
    dead = paper_figures.dead_groups_beside(0.31, "mirl", PAPER).set_index("recipe")["dead_share"]
    assert dead.to_dict() == {"MiRL": 0.422, "TMax-189": 0.273, "PivotRL": 0.253, "RaR+": 0.0013,
                              "+ env. selection": 0.429, "mirl": 0.31}


@pytest.mark.parametrize("draw", ["shares", "scores5", "scores6", "rates", "rates_alone", "passk", "environments",
                                  "seeds"])
def test_every_paper_figure_is_readable_with_and_without_a_run(draw):
    """No overlapping text and no legend larger than its data, whether the run has numbers yet or not;
    Figure 7's rates with long labels stack their panels so every bar keeps its room."""
    rates = pd.DataFrame([{"policy": p, "misbehavior": m, "judge": "rules", "rate": r}
                          for p, r in (("base", 0.5), ("selected", 0.3))
                          for m in ("no runnable command", "retry unchanged after failure")])
    fig = {"shares": lambda: paper_figures.shares_beside(None, PAPER),
           "scores5": lambda: paper_figures.scores_beside(None, PAPER),
           "scores6": lambda: paper_figures.scores_beside(None, PAPER, figure="figure6"),
           "rates": lambda: paper_figures.rates_beside(rates, PAPER, {"base": "SmolLM2", "selected": "MiRL"}),
           "rates_alone": lambda: paper_figures.rates_beside(None, PAPER),
           "passk": lambda: paper_figures.passk_beside(None, PAPER),
           "environments": lambda: paper_figures.environments_beside(None, PAPER),
           "seeds": lambda: paper_figures.seed_se_beside(None, PAPER)}[draw]()
    assert_readable(fig)
    if draw == "rates":
        widths = [ax.get_window_extent().width for ax in fig.axes]
        assert len(set(round(w) for w in widths)) == 1 and widths[0] > 0.5 * fig.bbox.width
