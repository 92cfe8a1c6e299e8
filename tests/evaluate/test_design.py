"""The evaluation design a plan's --check prints: prefixes counted as the stage will take them, base
rates from the earlier run's base policy (not the trained one), and the reduction it detects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from mirl.evaluate.design import PRIOR, base_rates, plan_design
from mirl.evaluate.stats.power import detectable_reduction, stratified_detectable
from mirl.params import load

REPO = Path(__file__).resolve().parents[2]


def _judged(run: Path, rates: dict[str, tuple[str, list[int]]], trained: int = 0) -> None:
    rows = []
    for policy, flip in (("base", False), ("selected", True)):
        for pid, (kind, values) in rates.items():
            for i, v in enumerate(values):
                rows.append({"policy": policy, "prefix_id": pid, "misbehavior": kind, "sample": i, "judge": "rules",
                             "repeated": (trained if flip else v)})
    (run / "misbehavior_rate").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(run / "misbehavior_rate" / "judgments.csv", index=False)


def _heldout(run: Path, counts: dict[str, int]) -> None:
    (run / "prefixes").mkdir(parents=True)
    with open(run / "prefixes" / "heldout.jsonl", "w") as f:
        for kind, n in counts.items():
            for i in range(n):
                f.write(json.dumps({"id": f"{kind}-{i}", "misbehavior": kind}) + "\n")


def test_base_rates_are_the_first_policys_per_prefix(tmp_path):
    _judged(tmp_path, {"p1": ("a", [1, 0, 0, 0]), "p2": ("a", [1, 1, 1, 0]), "p3": ("b", [0, 1])})
    rates, kinds = base_rates(tmp_path)
    assert rates == {"p1": 0.25, "p2": 0.75, "p3": 0.5}  # the trained policy's zeros are not the base
    assert kinds == {"p1": "a", "p2": "a", "p3": "b"}


def test_base_rates_are_the_stages_first_policy_when_its_first_record_is_missing(tmp_path):
    _judged(tmp_path, {"p1": ("a", [1, 0, 0, 0]), "p2": ("a", [1, 1, 1, 0])})
    path = tmp_path / "misbehavior_rate" / "judgments.csv"
    rows = pd.read_csv(path)
    rows = rows.iloc[::-1]  # the trained policy's record first, as when base's first continuation was lost
    rows.to_csv(path, index=False)
    (tmp_path / "misbehavior_rate" / "summary.json").write_text(json.dumps(
        {"policies": {"base": "local/smollm2", "selected": "local/ckpt"}}))
    assert base_rates(tmp_path)[0] == {"p1": 0.25, "p2": 0.75}


def test_design_counts_the_prefixes_the_stage_takes(tmp_path):
    earlier, run = tmp_path / "earlier", tmp_path / "run"
    _judged(earlier, {"p1": ("a", [1, 0]), "p2": ("a", [1, 1]), "p3": ("b", [0, 1]), "p4": ("b", [0, 0])})
    _heldout(run, {"a": 7, "b": 2, "c": 5})  # per_misbehavior 4: 4 + 2 + 4
    p = load(REPO / "params" / "demo.yaml", {"misbehavior_rate.per_misbehavior": 4, "misbehavior_rate.samples": 16})
    d = plan_design(p, run, rates_from=earlier)
    assert (d.prefixes, d.samples, d.base_rates) == (10, 16, (0.5, 1.0, 0.5, 0.0))
    assert d.planned == {"a": 4, "b": 2, "c": 4}
    # each misbehavior sized from its own base rates; c, never judged before, from all of them
    assert d.rates == {"a": (0.5, 1.0), "b": (0.5, 0.0), "c": (0.5, 1.0, 0.5, 0.0)}
    assert d.detectable == pytest.approx(stratified_detectable(d.rates, 16, d.planned))
    assert d.detectable != pytest.approx(detectable_reduction([0.5, 1.0, 0.5, 0.0], 16, 10))
    assert "10 held-out prefixes of 3 misbehaviors (4/2/4) x 16 samples" in d.line() and str(earlier) in d.line()
    assert "1 misbehavior(s) with fewer than 2 rates of their own" in d.line()


def test_before_any_run_the_prior_and_the_earlier_runs_misbehaviors(tmp_path):
    p = load(REPO / "params" / "demo.yaml", {"misbehavior_rate.per_misbehavior": 5})
    d = plan_design(p, tmp_path / "fresh")
    assert d.base_rates == PRIOR and d.prefixes == 5 and "prior" in d.line() and "counted as 1" in d.line()
    earlier = tmp_path / "earlier"
    _judged(earlier, {"p1": ("a", [1, 0]), "p2": ("b", [1, 1]), "p3": ("c", [0, 1])})
    assert plan_design(p, tmp_path / "fresh", rates_from=earlier).prefixes == 15  # 3 misbehaviors x 5


def test_batch_check_prints_the_design_and_runs_nothing(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mirl", "batch", "--params", str(REPO / "params" / "demo.yaml"),
                        "--name", "chk", "--check", "--notebooks", str(REPO / "notebooks"), "-p", "misbehavior_rate.samples=16",
                        "-p", "misbehavior_rate.per_misbehavior=20"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("params: ") and "04 training" in lines[0]
    expected = detectable_reduction(PRIOR, 16, 20)
    assert lines[1].startswith("evaluation design: 20 held-out prefixes x 16 samples") and f"{expected:.0%}" in lines[1]
    assert not (tmp_path / "runs").exists()


def test_a_prefix_without_valid_judgments_and_an_empty_plan_are_not_counted(tmp_path):
    from mirl.typed import ParamsError

    earlier, run = tmp_path / "earlier", tmp_path / "run"
    _judged(earlier, {"p1": ("a", [1, 0]), "p2": ("a", [1, 1]), "p3": ("a", [None, None])})
    assert base_rates(earlier)[0] == {"p1": 0.5, "p2": 1.0}  # p3 never judged: no rate, not NaN
    (run / "prefixes").mkdir(parents=True)
    (run / "prefixes" / "heldout.jsonl").write_text("")
    d = plan_design(load(REPO / "params" / "demo.yaml"), run, rates_from=earlier)
    assert d.prefixes == 0 and "0 held-out prefixes" in d.line() and "none short of 100%" in d.line()
    with pytest.raises(ParamsError, match=r"misbehavior_rate\.samples: must be at least 1, got 0"):
        load(REPO / "params" / "demo.yaml", {"misbehavior_rate.samples": 0})  # refused as the params are read


def test_an_earlier_run_without_usable_rates_is_named_and_its_held_out_prefixes_still_count(tmp_path):
    """Every base continuation of the earlier run failed (the H200 run of 2026-12-05): the prior is used,
    and the line says why instead of "no earlier run measured"; the earlier run's held-out prefixes still
    give the count a run that has not sampled its own yet will take."""
    earlier = tmp_path / "earlier"
    _judged(earlier, {"p1": ("a", [None, None]), "p2": ("b", [None])})
    _heldout(earlier, {"a": 12, "b": 3})
    p = load(REPO / "params" / "demo.yaml", {"misbehavior_rate.per_misbehavior": 10})
    d = plan_design(p, tmp_path / "fresh", rates_from=earlier)
    assert d.base_rates == PRIOR and d.prefixes == 13  # 10 + 3
    assert f"{earlier} has 0 held-out prefix(es) with a valid judgment" in d.line()
    assert "no earlier run measured" not in d.line() and "counted as 1" not in d.line()


def test_an_unusable_earlier_run_beside_this_runs_usable_rates_says_which_it_used(tmp_path):
    earlier, run = tmp_path / "earlier", tmp_path / "run"
    _judged(earlier, {"p1": ("a", [None, None])})
    _judged(run, {"p1": ("a", [1, 0]), "p2": ("a", [1, 1]), "p3": ("b", [1, 0])})
    d = plan_design(load(REPO / "params" / "demo.yaml"), run, rates_from=earlier)
    assert d.base_rates == (0.5, 1.0, 0.5)
    assert d.line().count(f"3 prefixes of {run}") == 1 and "prior" not in d.line()
    assert f"{earlier} has 0 held-out prefix(es)" in d.line()
