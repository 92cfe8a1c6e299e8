"""Notebook 07 headless through papermill: on runs the stages filled (built in tests/cost/fixtures.py),
with the paper's reported numbers overlaid, and on the paper's numbers alone (a run with nothing yet)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

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
    for name in ("cost_relative", "cost_side_by_side", "cost_paper_relative", "cost_overlay"):
        assert (tmp_path / "reports" / "mirl" / f"{name}.png").stat().st_size > 5_000, name
    text = text_outputs(nb)
    assert "mirl: $" in text and "top roles:" in text
    # the paper's totals with its pricing rule imply about 21 and 29 steps per rollout
    assert "20.8" in text and "29.2" in text


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
