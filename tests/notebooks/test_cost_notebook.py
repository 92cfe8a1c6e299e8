"""Notebook 07 headless through papermill: on runs the stages filled (built in tests/cost/fixtures.py),
with the paper's reported numbers overlaid, and on the paper's numbers alone (a run with nothing yet)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from mirl import reported
from mirl.cost.arithmetic import implied_steps_per_rollout
from mirl.cost.params import PAPER_PRICES, PAPER_RATES
from mirl.cost.policy import policy_cost_usd
from mirl.jsonl import read_jsonl
from mirl.llm.pricing import usd_price
from mirl.notebook import RunSpec, execute
from tests.cost.fixtures import preprocessing_run, training_run

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "07_cost_accounting.ipynb"


def errors(nb: dict) -> list:
    return [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]


def text_outputs(nb: dict) -> str:
    out = []
    for c in nb["cells"]:
        for o in c.get("outputs", []):
            t = o.get("text") or o.get("data", {}).get("text/plain") or ""
            out.append("".join(t))
    return "\n".join(out)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_notebook_07_on_runs_with_the_paper_overlaid(tmp_path):
    runs = tmp_path / "runs"
    training_run(runs / "mirl")
    preprocessing_run(runs / "pre")
    spec = RunSpec(notebook=NOTEBOOK, run_name="mirl", params_file=REPO / "params" / "demo.yaml",
                   overrides={"cost.runs": ["mirl", "pre"], "cost.reference": "TMax-4B"},
                   runs_root=runs, reports_root=tmp_path / "reports", cell_timeout_s=500)
    nb = json.loads(execute(spec).read_text())
    assert not errors(nb)
    rows = {(r["run"], r["phase"]): r for r in csv.DictReader((tmp_path / "reports" / "mirl" / "cost_totals.csv").open())}
    # up to the selected checkpoint (step 2): 3 profiling episodes + 2 rollouts in each of 2 steps
    assert int(float(rows["mirl", "rl"]["rollouts"])) == 4 and int(float(rows["mirl", "preprocessing"]["rollouts"])) == 3
    assert float(rows["mirl", "rl"]["api_usd"]) == pytest.approx(4 * 0.02)
    assert ("pre", "rl") not in rows
    for name in ("cost_relative", "cost_side_by_side", "cost_paper_relative", "cost_paper_side_by_side", "cost_overlay"):
        assert (tmp_path / "reports" / "mirl" / f"{name}.png").stat().st_size > 5_000, name
        assert (tmp_path / "reports" / "mirl" / f"{name}.pdf").exists(), name
    text = text_outputs(nb)
    # the notes: each run's total from the table, and its costliest role from its ledger
    for run in ("mirl", "pre"):
        total = sum(float(r["total_usd"]) for (name, _), r in rows.items() if name == run)
        assert f"{run}: ${total:.2f} in all" in text, (run, total)
        by_role: dict[str, float] = {}
        for call in read_jsonl(runs / run / "llm_calls.jsonl")[0]:
            by_role[call["role"]] = by_role.get(call["role"], 0.0) + float(call["cost_usd"] or 0.0)
        role = max(by_role, key=by_role.get)
        assert f"{run}: top roles: {role} ${by_role[role]:.2f}" in text, (run, by_role)
    # the paper's arithmetic redone: 75.9K rollouts from S*B*G/(1-d); its totals imply about 21 and 29 steps per rollout
    rows = {r["quantity"]: r for r in csv.DictReader((tmp_path / "reports" / "mirl" / "cost_paper_arithmetic.csv").open())}
    assert float(rows["TMax-4B rollouts"]["recomputed"]) == pytest.approx(200 * 8 * 32 / 0.675)
    totals = reported.read()["figure9"]["recipes"]
    policy = usd_price("Qwen3.5-4B", PAPER_PRICES["Qwen3.5-4B"], PAPER_RATES)
    for recipe in ("MiRL", "TMax-4B"):
        t = totals[recipe]["total"]
        steps = float(rows[f"{recipe} steps per rollout (not printed)"]["recomputed"])
        # the steps at which the paper's rule prices the printed tokens at the printed total
        assert steps == pytest.approx(implied_steps_per_rollout(t["total_usd"], t["api_usd"], t["input_tokens"],
                                                                t["output_tokens"], policy), rel=1e-6), recipe
        assert policy_cost_usd(t["input_tokens"], t["output_tokens"], steps, policy) + t["api_usd"] == pytest.approx(
            t["total_usd"], rel=1e-4), recipe
    assert "Claude Opus 5" in text  # Table 4 beside the report's prices


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_notebook_07_on_the_paper_numbers_alone(tmp_path):
    spec = RunSpec(notebook=NOTEBOOK, run_name="fresh", params_file=REPO / "params" / "demo.yaml",
                   overrides={"cost.reference": "TMax-4B"}, runs_root=tmp_path / "runs",
                   reports_root=tmp_path / "reports", cell_timeout_s=500)
    nb = json.loads(execute(spec).read_text())
    assert not errors(nb)
    assert "the runs recorded nothing yet" in text_outputs(nb)
    assert (tmp_path / "reports" / "fresh" / "cost_paper_relative.png").stat().st_size > 5_000
    comp = list(csv.DictReader((tmp_path / "runs" / "fresh" / "cost" / "comparison.csv").open()))
    mirl = {r["resource"]: float(r["percent"]) for r in comp if r["recipe"] == "MiRL" and r["percent"]}
    assert mirl["total_usd"] == pytest.approx(100 * 1960.3 / 3521.5)
