"""The notebooks' tables and figures from the stages' outputs: solve counts by hand, every figure
written as PNG and PDF, the seed curve only for policies with at least 4 runs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mirl import plotstyle
from mirl.evaluate import report


def per_task():
    return pd.DataFrame([{"policy": "a", "task": "t1", "n": 3, "c": 3}, {"policy": "a", "task": "t2", "n": 3, "c": 1},
                         {"policy": "a", "task": "t3", "n": 3, "c": 1}, {"policy": "b", "task": "t1", "n": 3, "c": 0}])


def test_solve_counts_tally_tasks_by_solved_runs():
    counts = report.solve_counts(per_task(), {"a": "A"})
    assert list(counts.index) == [0, 1, 2, 3]
    assert counts["A"].tolist() == [0, 2, 0, 1] and counts["b"].tolist() == [1, 0, 0, 0]


def test_figures_are_saved_as_png_and_pdf(tmp_path):
    rates = pd.DataFrame([{"policy": p, "misbehavior": m, "judge": j, "n_prefixes": 2, "n_samples": 4, "n_failed": 0,
                           "rate": r, "se": 0.1, "ci_low": max(0, r - 0.2), "ci_high": min(1, r + 0.2)}
                          for p, r in (("a", 0.5), ("b", 0.25)) for m in ("m1", "all") for j in ("rules", "llm:x")])
    passk = pd.DataFrame([{"policy": p, "k": k, "n_tasks": 3, "n_short": 0, "mean": 0.2 * k, "se": 0.05}
                          for p in ("a", "b") for k in (1, 2, 3)])
    for name, fig in (("rates", report.rate_figure(rates)), ("passk", report.passk_figure(passk)),
                      ("solves", report.solve_count_figure(per_task()))):
        png, pdf = plotstyle.save(fig, tmp_path, name)
        assert png.stat().st_size > 5_000 and pdf.read_bytes().startswith(b"%PDF")
    table = report.rate_table(rates, {"a": "A"})
    assert table.loc["m1", ("A", "rules")] == "0.50 [0.30, 0.70] (n=4)"


def test_seed_curve_only_with_four_runs_or_more():
    rows = [{"policy": p, "task": t, "run": r, "reward": float((r + i) % 2), "error": None}
            for p, runs in (("a", 4), ("b", 3)) for i, t in enumerate(("t1", "t2")) for r in range(runs)]
    curves = report.seed_curves(pd.DataFrame(rows))
    assert set(curves["policy"]) == {"a"} and curves["k"].tolist() == [1, 2, 3, 4]
    # every run of a scores 1/2 (one task passes, the other fails): no spread between seeds
    assert curves["se"].iloc[1:].eq(0).all()


def test_trained_policies_sit_at_the_environments_their_run_trained_on(tmp_path):
    """Figure 11 for a run: a checkpoint policy's x is its training run's environment count."""
    import json

    from mirl.evaluate.report import environment_points

    ckpt = tmp_path / "mirl-47" / "training" / "checkpoints" / "step-000010"
    ckpt.mkdir(parents=True)
    (tmp_path / "mirl-47" / "training" / "summary.json").write_text(json.dumps({"environments": 47}))
    scores = pd.DataFrame([{"policy": "base", "model": "local/smollm2", "run_mean": 0.2, "run_se": 0.01},
                           {"policy": "selected", "model": f"local/{ckpt}", "run_mean": 0.4, "run_se": 0.02}])
    trained, others = environment_points(scores, {"selected": "MiRL"})
    assert trained.to_dict("records") == [{"policy": "MiRL", "environments": 47, "mean": 0.4, "se": 0.02}]
    assert others.to_dict("records") == [{"policy": "base", "mean": 0.2}]


def test_the_seed_curve_is_saved_or_the_reason_given(tmp_path):
    rows = [{"policy": "a", "task": t, "run": r, "reward": float((r + i) % 2), "error": None}
            for i, t in enumerate(("t1", "t2")) for r in range(4)]
    curves = report.seed_curves(pd.DataFrame(rows))
    assert report.save_seed_curves(curves, {"a": "A"}, tmp_path) is curves
    assert (tmp_path / "seed_curve.png").exists() and len(pd.read_csv(tmp_path / "seed_curve.csv")) == len(curves)
    few = report.seed_curves(pd.DataFrame([r for r in rows if r["run"] < 3]))
    assert report.save_seed_curves(few, {}, tmp_path / "none") == "fewer than 4 runs per policy: no seed curve"
    assert not (tmp_path / "none").exists()


def test_the_seed_curve_reads_trials_as_the_notebook_loads_them(tmp_path):
    """trials.csv read back (`report.load`, what notebook 06 does) has NaN where a trial had no
    error or no reward: they are None to the curve, not a bad value."""
    rows = [{"policy": "a", "task": t, "run": r, "reward": None if (t, r) == ("t1", 3) else float((r + i) % 2),
             "error": None, "origin": "played"} for i, t in enumerate(("t1", "t2")) for r in range(4)]
    (tmp_path / "pass_at_k").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "pass_at_k" / "trials.csv", index=False)
    trials = report.load(tmp_path, "pass_at_k", "trials.csv")
    assert trials["error"].isna().all() and trials["reward"].isna().sum() == 1
    assert report.seed_curves(trials)["k"].tolist() == [1, 2, 3, 4]


def test_judgment_counts_tally_repeated_avoided_and_unjudged():
    j = pd.DataFrame([{"policy": "a", "judge": "rules", "repeated": v} for v in (True, True, False, None)] +
                     [{"policy": "b", "judge": "rules", "repeated": False}])
    counts = report.judgment_counts(j)
    a, b = counts.loc[("a", "rules")], counts.loc[("b", "rules")]
    assert (a[True], a[False], b[True], b[False]) == (2, 1, 0, 1)
    assert counts.sum(axis=1).tolist() == [4, 1]  # the unjudged one is counted too


def test_difference_table_gives_signed_points_per_pair():
    diffs = pd.DataFrame([
        {"judge": "rules", "misbehavior": m, "reference": "base", "policy": "mirl", "other": o, "prefixes": 10,
         "base_rate": 0.6, "difference": d, "ci_low": lo, "ci_high": hi}
        for m in ("all", "m1") for o, d, lo, hi in (("outcome", 0.13, -0.015, 0.262), ("tmax", 0.18, 0.04, float("inf")))])
    table = report.difference_table(diffs, {"mirl": "MiRL"})
    assert table.loc["all", ("MiRL - outcome", "rules")] == "+13 points [-2, +26]"
    assert table.loc["m1", ("MiRL - tmax", "rules")] == "+18 points [+4, inf]"
    assert "fewer than two" in report.difference_table(diffs.iloc[:0]).iloc[0, 0]


def test_reduction_and_success_figures_draw_intervals_and_say_when_empty():
    from tests.test_reported import assert_readable

    reductions = pd.DataFrame([
        {"judge": "rules", "misbehavior": m, "reference": "base", "policy": p, "prefixes": 10, "base_rate": 0.6,
         "rate": 0.3, "reduction": red, "ci_low": red - 0.2, "ci_high": red + 0.2}
        for m in ("all", "no runnable command") for p, red in (("mirl", 0.5), ("tmax", 0.1))])
    fig = report.reduction_figure(reductions, {"base": "base (x)"})
    assert len(fig.axes[0].patches) == 4 and "vs base (x)" in fig.axes[0].get_ylabel()
    assert_readable(fig)
    table = report.reduction_table(reductions)
    assert table.loc["all", ("mirl", "rules")] == "50% [30%, 70%] (10 prefixes)"
    assert "no policy" in report.reduction_table(reductions.iloc[:0]).iloc[0, 0]
    assert report.reduction_figure(reductions.iloc[:0]).axes[0].texts
    unknown = reductions.assign(reduction=[0.5, float("nan"), 0.2, 0.1])
    assert [t.get_text() for t in report.reduction_figure(unknown).axes[0].texts] == ["n/a"]
    # a rare misbehavior: some bootstrap draws had a base rate of 0, so the interval is unbounded below
    rare = reductions.assign(ci_low=[0.3, float("-inf"), 0.0, -0.1])
    fig = report.reduction_figure(rare)
    assert [t.get_text() for t in fig.axes[0].texts] == ["-inf"] and np.isfinite(fig.axes[0].get_ylim()).all()
    assert fig.axes[0].get_ylim()[0] < -1.0
    assert report.reduction_table(rare).loc["all", ("tmax", "rules")] == "10% [-inf, 30%] (10 prefixes)"
    success = pd.DataFrame([{"policy": "base", "misbehavior": "all", "judge": "tests", "n_prefixes": 3,
                             "n_samples": 12, "n_failed": 0, "success": 0.25, "se": 0.1, "ci_low": 0.1, "ci_high": 0.4}])
    assert report.success_table(success).loc["all", ("base", "tests")] == "0.25 [0.10, 0.40] (n=12)"
    assert len(report.success_figure(success).axes[0].patches) == 1
    assert "verify is off" in report.success_figure(success.iloc[:0]).axes[0].texts[0].get_text()


def test_actions_are_shown_by_label_and_silence_cuts_as_warnings():
    actions = pd.DataFrame([{"policy": "local//x/runs/r/recipes/mirl/ckpt", "silent_share": 0.9, "ran_steps": 3},
                            {"policy": "base", "silent_share": 0.4, "ran_steps": 30}])
    t = report.action_table(actions, {"local//x/runs/r/recipes/mirl/ckpt": "mirl"})
    assert list(t.index) == ["mirl", "base"] and "policy" not in t and t.loc["mirl", "silent_share"] == 0.9
    assert report.cut_warnings({"cut_by_silence": [], "cut_by_failing_commands": []}) == report.cut_warnings({}) == []
    [line] = report.cut_warnings({"cut_by_silence": ["mirl | rules"]})
    assert line.startswith("warning: mirl | rules:") and "the cut is silence" in line
    [quiet, failing] = report.cut_warnings({"cut_by_silence": ["a | rules"], "cut_by_failing_commands": ["b | rules"]})
    assert quiet.startswith("warning: a | rules:") and failing.startswith("warning: b | rules:")
    assert "exiting 0" in failing and "actions.csv" in failing
