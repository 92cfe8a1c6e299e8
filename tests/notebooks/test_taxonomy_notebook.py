"""Notebook 02 headless through papermill: offline annotator on profiling output, and an LLM annotator
answered over HTTP by a local OpenAI-compatible test server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mirl.notebook import RunSpec, execute
from mirl.params import make
from mirl.records import load_error_steps
from mirl.records.taxonomy import TaxonomyStore
from tests.fakes.annotator import ACTS, NO_COMMAND
from tests.fakes.openai_server import serve

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "02_taxonomy_review.ipynb"
REPLIES = ["Let me look.\n```bash\nls -la\n```", "I am not sure what to do.",
           "Done.\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"]


@pytest.fixture
def profiled(tmp_path):
    sys.path.insert(0, str(REPO / "tests" / "agent"))
    from agent_doubles import FakeSandbox

    from mirl.llm.scripted import ScriptedModel
    from mirl.profiling.stage import run_profiling
    from mirl.tasks import load_task

    run = tmp_path / "runs" / "t"
    # one worker: the scripted replies cycle across episodes, so only a serial run gives every run the
    # same error steps (two workers interleave them, and which types recur across batches then varies)
    tasks = [load_task(REPO / "tasks" / t) for t in ("count-lines", "fix-permissions", "dedupe-sort-list")]
    run_profiling(make(profiling={"seeds": 2, "workers": 1}, agent={"max_steps": 5}), run, tasks=tasks, sandbox=FakeSandbox(),
                  policy=ScriptedModel(REPLIES, cycle=True), progress=False)
    return tmp_path


def executed_ok(path: Path) -> None:
    nb = json.loads(path.read_text())
    errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_notebook_offline_annotator(profiled):
    spec = RunSpec(notebook=NOTEBOOK, run_name="t", params_file=REPO / "params" / "demo.yaml",
                   runs_root=profiled / "runs", reports_root=profiled / "reports", cell_timeout_s=500)
    executed_ok(execute(spec))
    run = profiled / "runs" / "t"
    store = TaxonomyStore(run / "taxonomy")
    assert store.versions() == [1]
    steps = load_error_steps(run)
    assert {lb.id for lb in store.load_labels(1)} == {s.id for s in steps}
    reports = profiled / "reports" / "t"
    assert (reports / "taxonomy_figure4.png").stat().st_size > 5_000
    # Table 2 (the figure's data) from the labels: each type's share of error steps and of profiled
    # environments, and the union of the kept types
    import pandas as pd

    labels = {lb.id: set(lb.types) for lb in store.load_labels(1)}
    env_of = {s.id: s.env for s in steps}
    n_envs = json.loads((run / "profiling" / "summary.json").read_text())["environments"]
    table2 = pd.read_csv(reports / "taxonomy_table2.csv").set_index("type")
    kept = [t.name for t in store.load(1).types if t.status == "kept"]
    assert kept and sorted(table2.index[:-1]) == sorted(kept) and table2.index[-1] == "union of kept types"
    for name in kept:
        having = [i for i, types in labels.items() if name in types]
        assert table2.loc[name, "share"] == pytest.approx(len(having) / len(steps)), name
        assert table2.loc[name, "env_share"] == pytest.approx(len({env_of[i] for i in having}) / n_envs), name
    union = [i for i, types in labels.items() if types & set(kept)]
    assert table2.loc["union of kept types", "share"] == pytest.approx(len(union) / len(steps))
    # beside the paper: its eight types and union (grey) and the run's, shares of the profiled environments
    assert (reports / "taxonomy_figure4_paper.png").stat().st_size > 5_000

    beside = pd.read_csv(reports / "taxonomy_table2_paper.csv")
    assert (beside["source"] == "paper").sum() == 9 and (beside["type"] == "union of kept types").sum() == 2
    profiled = json.loads((run / "profiling" / "summary.json").read_text())["environments"]
    run_rows = beside[(beside["source"] == "run") & (beside["type"] == "no runnable command")]
    envs = {s.env for s in steps if s.rejected_command is None}
    assert run_rows["env_share"].item() == pytest.approx(len(envs) / profiled)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_notebook_llm_annotator_over_http(profiled, monkeypatch):
    server, url = serve()
    monkeypatch.setenv("MIRL_TEST_API_KEY", "sk-annotator-test-0000")
    overrides = {"taxonomy.annotator": "llm", "taxonomy.batch_size": 4, "taxonomy.label_batch_size": 5,
                 "models.annotator": {"model": "openai/test-annotator", "api_base": url,
                                      "api_key_env": "MIRL_TEST_API_KEY"}}
    spec = RunSpec(notebook=NOTEBOOK, run_name="t", params_file=REPO / "params" / "demo.yaml", overrides=overrides,
                   runs_root=profiled / "runs", reports_root=profiled / "reports", cell_timeout_s=500)
    try:
        executed_ok(execute(spec))
    finally:
        server.shutdown()
    run = profiled / "runs" / "t"
    steps = {s.id: s for s in load_error_steps(run)}
    labels = TaxonomyStore(run / "taxonomy").load_labels(1)
    expected = {i: [NO_COMMAND if s.rejected_command is None else ACTS] for i, s in steps.items()}
    assert {lb.id: lb.types for lb in labels} == expected
    summary = json.loads((run / "taxonomy" / "summary.json").read_text())
    assert summary["llm"]["annotator"]["calls"] >= 2 and summary["version"] == 1
