"""Comparisons: shares of a reference recipe (Figure 9), side by side (Figure 10), the paper's numbers,
and the report of several runs."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from mirl.cost.compare import relative, run_frame, side_by_side
from mirl.cost.resources import resources
from mirl.cost.stage import run_cost
from mirl.cost.totals import price, totals, up_to
from mirl.params import make
from mirl.reported import read_costs, reported_frame
from mirl.runner.fingerprint import ParamsMismatch
from mirl.typed import ParamsError
from tests.cost.fixtures import preprocessing_run, training_run

PAPER = "params/paper_reported.yaml"


def test_paper_figure_9_shares_of_tmax():
    rel = relative(reported_frame(read_costs(PAPER)), "TMax-4B").set_index(["recipe", "resource"])["percent"]
    assert rel["MiRL", "rollouts"] == pytest.approx(100 * 26_200 / 75_900)
    assert rel["MiRL", "input_tokens"] == pytest.approx(100 * 10.5 / 30.9)
    assert rel["MiRL", "gpu_hours"] == pytest.approx(100 * 202.8 / 526.6)
    assert rel["MiRL", "total_usd"] == pytest.approx(100 * 1960.3 / 3521.5)
    assert math.isnan(rel["MiRL", "api_usd"])  # TMax paid no API fee: no share of nothing
    assert rel["TMax-4B", "environments"] == pytest.approx(100)


def test_phases_stack_to_the_recipe_total():
    long = pd.DataFrame([
        {"recipe": "a", "phase": "preprocessing", "resource": "rollouts", "value": 10.0, "source": "run"},
        {"recipe": "a", "phase": "rl", "resource": "rollouts", "value": 30.0, "source": "run"},
        {"recipe": "b", "phase": "rl", "resource": "rollouts", "value": 80.0, "source": "run"}])
    rel = relative(long, "b").set_index(["recipe", "phase"])["percent"]
    assert rel["a", "preprocessing"] == pytest.approx(12.5) and rel["a", "rl"] == pytest.approx(37.5)
    assert side_by_side(long).loc["rollouts"].to_dict() == {"a": 40.0, "b": 80.0}
    with pytest.raises(ValueError, match="reference 'c' is none of the recipes"):
        relative(long, "c")


def test_environments_per_phase_are_the_ones_each_phase_adds(tmp_path):
    run = training_run(tmp_path / "r")
    df = up_to(resources(run), 2)
    long = run_frame(df, price(totals(df, ("run", "phase")), None)).set_index(["phase", "resource"])["value"]
    assert long["preprocessing", "environments"] == 3  # env-a, env-b, env-c
    assert long["rl", "environments"] == 1  # env-d; env-a was seen before


@pytest.mark.parametrize("text,match", [
    ("recipes: {}\n", "needs `recipes:`"),
    ("recipes: {a: {total: {rollouts: 1, gpus: 2}}}\n", r"recipes\.a\.total: unknown resource\(s\) gpus"),
    ("recipes: {a: {total: {rollouts: many}}}\n", r"recipes\.a\.total\.rollouts must be a number"),
    ("reference: z\nrecipes: {a: {total: {rollouts: 1}}}\n", "reference 'z' is none of the recipes"),
])
def test_a_bad_reported_file_names_itself_and_the_key(tmp_path, text, match):
    path = tmp_path / "reported.yaml"
    path.write_text(text)
    with pytest.raises(ParamsError, match=match) as err:
        read_costs(path)
    assert str(path) in str(err.value)


def test_report_of_two_runs_each_cut_at_its_own_step(tmp_path):
    runs = tmp_path / "runs"
    training_run(runs / "mirl")
    preprocessing_run(runs / "pre")
    params = make(cost={"runs": ["mirl", "pre"], "reference": "mirl", "paper_reference": ""})
    summary = run_cost(params, runs / "mirl").summary
    assert summary["up_to_step"] == {"mirl": 2, "pre": None}
    assert summary["totals"]["mirl"]["rollouts"] == 7 and summary["totals"]["pre"]["rollouts"] == 3
    written = json.loads((runs / "mirl" / "cost" / "summary.json").read_text())
    assert written["totals"] == summary["totals"]
    assert written["complete"] is True and written["elapsed_s"] >= 0  # `mirl batch` calls the stage finished
    comp = pd.read_csv(runs / "mirl" / "cost" / "comparison.csv")
    share = comp[(comp["recipe"] == "pre") & (comp["resource"] == "rollouts")]["percent"].sum()
    assert share == pytest.approx(100 * 3 / 7)
    roles = pd.read_csv(runs / "mirl" / "cost" / "roles.csv").set_index(["run", "role"])["usd"]
    # the policy by the paper's rule per phase (4 and 3 steps per rollout), the annotator repriced in CNY
    policy = (4500 * 0.33 + 4500 * 0.066 + 600 * 1.005 + 1200 * 0.33 + 600 * 0.066 + 180 * 1.005) / 1e6
    annotator = 3 * (10_000 * 3.646 + 2_000 * 21.875) / 1e6 * 0.13714
    assert roles["mirl", "policy"] == pytest.approx(policy)
    assert roles["mirl", "annotator"] == pytest.approx(annotator)
    assert summary["totals"]["mirl"]["total_usd"] == pytest.approx(policy + annotator + 0.70)
    with pytest.raises(ParamsError, match="cost.runs: no run 'nope'"):
        run_cost(make(cost={"runs": ["nope"]}), runs / "pre")
    assert not (runs / "pre" / "cost" / "summary.json").exists()
    # on the common runner: its params are stored, other params are refused without --force, and
    # neither refusal changed the stored report
    stored = json.loads((runs / "mirl" / "cost" / "summary.json").read_text())
    assert stored["complete"] and stored["totals"] == summary["totals"]
    assert json.loads((runs / "mirl" / "cost" / "params.json").read_text())["params"]["cost"]["runs"] == ["mirl", "pre"]
    with pytest.raises(ParamsMismatch, match="cost.reference"):
        run_cost(make(cost={"runs": ["mirl", "pre"], "reference": "pre"}), runs / "mirl")


def test_a_run_that_recorded_nothing_yet_gets_a_report_that_says_so(tmp_path):
    """Notebook 07 on a fresh run (beside the paper's recipes): no shares of an empty reference, a note
    that says why, and its figures still drawn; a reference that is no run's name is still an error."""
    from mirl.cost import report as shown

    run = tmp_path / "runs" / "fresh"
    run.mkdir(parents=True)
    rep = run_cost(make(), run)
    assert "fresh: nothing recorded yet" in rep.notes and any("no resource is a share of fresh" in n for n in rep.notes)
    assert rep.reference == "fresh" and rep.comparison["percent"].isna().all()
    shown.save_relative(rep, tmp_path)
    assert (tmp_path / "cost_relative.png").exists()
    assert shown.save_side_by_side(rep, tmp_path) == "the runs recorded nothing yet"
    with pytest.raises(ValueError, match="reference 'nope' is none of the recipes"):
        run_cost(make(cost={"reference": "nope"}), run, force=True)


@pytest.mark.parametrize("who", ["one run", "the paper's recipes"])
def test_the_cost_figures_are_readable(who):
    """The shares of the reference end inside their axes and clear of the legend (in notebook 07 a run
    compared with itself wrote its "100%" over the legend), and the side-by-side panels do not collide."""
    from mirl.cost.plots import relative_figure, side_by_side_figure
    from tests.test_reported import assert_readable

    if who == "one run":
        long = pd.DataFrame([{"recipe": "demo", "phase": ph, "resource": r, "value": v, "source": "run"}
                             for r in ("rollouts", "input_tokens", "output_tokens", "environments", "total_usd")
                             for ph, v in (("preprocessing", 6.0), ("rl", 6.0))])
        ref = "demo"
    else:
        long, ref = reported_frame(read_costs(PAPER)), "TMax-4B"
    rel = relative(long, ref)
    fig = relative_figure(rel)
    assert_readable(fig)
    ax = fig.axes[0]
    right = ax.get_window_extent().x1
    assert all(t.get_window_extent().x1 <= right for t in ax.texts), "a share is written past the axes"
    assert_readable(side_by_side_figure(long))


def test_amounts_read_as_people_say_them():
    from mirl.cost.plots import human

    assert [human(v) for v in (0.25, 737.1, 999.7, 133_100, 999_600, 10.5e9)] == \
        ["0.25", "737", "1K", "133K", "1M", "10.5B"]
