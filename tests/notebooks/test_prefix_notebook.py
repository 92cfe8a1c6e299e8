"""Notebook 03 headless through papermill on a run that profiling and taxonomy have filled."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from mirl.notebook import RunSpec, execute
from mirl.params import make

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "03_prefix_filtering.ipynb"
REPLIES = ["Let me look.\n```bash\nls -la /app\n```", "I am not sure what to do.",
           "Done.\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_notebook_03_on_profiled_and_labelled_run(tmp_path, bwrap_sandbox):
    sys.path.insert(0, str(REPO / "tests" / "agent"))
    from mirl.llm.scripted import ScriptedModel
    from mirl.profiling.stage import run_profiling
    from mirl.tasks import load_task
    from mirl.taxonomy.stage import run_taxonomy

    run = tmp_path / "runs" / "t"
    tasks = [load_task(REPO / "tasks" / t) for t in ("count-lines", "fix-permissions")]
    params = make(profiling={"seeds": 2}, agent={"max_steps": 5}, sandbox={"backend": "bwrap"})
    run_profiling(params, run, tasks=tasks, sandbox=bwrap_sandbox, policy=ScriptedModel(REPLIES, cycle=True),
                  progress=False)
    run_taxonomy(params, run, progress=False)
    overrides = {"sandbox.backend": "bwrap", "agent.max_steps": 5, "prefixes.per_misbehavior": 3,
                 "prefixes.heldout_per_misbehavior": 1, "prefixes.snapshot": False}
    spec = RunSpec(notebook=NOTEBOOK, run_name="t", params_file=REPO / "params" / "demo.yaml", overrides=overrides,
                   runs_root=tmp_path / "runs", reports_root=tmp_path / "reports", cell_timeout_s=500)
    out = execute(spec)
    nb = json.loads(out.read_text())
    assert not [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    prefixes = [json.loads(line) for line in (run / "prefixes" / "prefixes.jsonl").read_text().splitlines()]
    assert prefixes and all(p["verdict"].get("exact") is not None for p in prefixes)
    # the recordings came from the same backend; only `ls -la`'s modification times (of /app/.., made when
    # the session starts) can differ, and normalized mode masks exactly those
    assert all(p["verdict"]["normalized"] for p in prefixes), [p["divergence"] for p in prefixes]
    assert all(set(p["masks"]) <= {"date"} for p in prefixes)
    exact = sum(p["verdict"]["exact"] for p in prefixes)
    rows = list(csv.DictReader((tmp_path / "reports" / "t" / "prefix_funnel.csv").open()))
    overall = rows[-1]
    assert overall["misbehavior"] == "all" and int(overall["sampled"]) == len(prefixes) == int(overall["normalized"])
    assert int(overall["exact"]) == exact
    assert (tmp_path / "reports" / "t" / "prefix_funnel.png").stat().st_size > 5_000
    assert (tmp_path / "reports" / "t" / "prefix_funnel_paper.png").stat().st_size > 5_000  # beside the paper's
