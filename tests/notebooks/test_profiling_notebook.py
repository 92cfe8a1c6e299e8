"""Notebook 01 headless through papermill, with LLM roles answered by a local OpenAI-compatible server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirl.config import ParamsError
from mirl.notebook import RunSpec, execute, resolve_parameters
from tests.fakes.openai_server import serve

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "01_profiling.ipynb"
SECRET = "sk-test-secret-0123456789abcdef"


def test_params_are_checked_before_any_kernel(tmp_path):
    with pytest.raises(ParamsError, match="seeds"):
        resolve_parameters(RunSpec(notebook=NOTEBOOK, params_file=REPO / "params" / "demo.yaml",
                                   overrides={"profiling.seeds": "two"}))
    with pytest.raises(ParamsError, match="profiling.sedes"):
        resolve_parameters(RunSpec(notebook=NOTEBOOK, overrides={"profiling.sedes": 1}))
    flat, typed = resolve_parameters(RunSpec(notebook=NOTEBOOK, params_file=REPO / "params" / "paper.yaml"))
    assert typed.profiling.seeds == 2 and typed.profiling.localizer == "llm" and flat["teacher_tries"] == 3
    assert flat["models"]["localizer"]["model"] == typed.models.localizer.model


@pytest.mark.slow
def test_notebook_with_llm_roles(tmp_path, monkeypatch):
    from mirl.sandbox import bwrap_backend

    if not bwrap_backend.available():
        pytest.skip("needs the bwrap backend (`apt-get install bubblewrap`, `mirl image build`)")
    server, url = serve()
    monkeypatch.setenv("MIRL_TEST_API_KEY", SECRET)
    role = {"api_base": url, "api_key_env": "MIRL_TEST_API_KEY"}
    overrides = {"profiling.tasks": str(REPO / "tasks"), "profiling.max_tasks": 2, "profiling.seeds": 1,
                 "profiling.workers": 1, "sandbox.backend": "bwrap", "agent.max_steps": 5,
                 "models.policy": {"model": "openai/test-policy", **role}, "profiling.localizer": "llm",
                 "models.localizer": {"model": "openai/test-localizer", **role}, "profiling.teacher": "llm",
                 "models.teacher": {"model": "openai/test-teacher", **role}}
    spec = RunSpec(notebook=NOTEBOOK, run_name="llm", params_file=REPO / "params" / "demo.yaml", overrides=overrides,
                   runs_root=tmp_path / "runs", reports_root=tmp_path / "reports", cell_timeout_s=600)
    try:
        out = execute(spec)
    finally:
        server.shutdown()
    run = tmp_path / "runs" / "llm"
    errors = [json.loads(line) for line in (run / "profiling" / "error_steps.jsonl").read_text().splitlines()]
    # the test server's policy starts every episode with `rm -rf ./*`, which its localizer rejects
    assert len(errors) == 2 and {e["step"] for e in errors} == {0}
    assert all(e["source"] == "llm:openai/test-localizer" and e["correction"] == "ls -la" for e in errors)
    summary = json.loads((run / "profiling" / "summary.json").read_text())
    assert summary["exit_reasons"] == {"submitted": 2}
    assert set(summary["llm"]) == {"policy", "localizer", "teacher"}
    assert (tmp_path / "reports" / "llm" / "profiling_overview.png").stat().st_size > 10_000
    executed = json.loads(out.read_text())
    assert not any(o.get("output_type") == "error" for c in executed["cells"] for o in c.get("outputs", []))
    assert any(f"Bearer {SECRET}" == k for k in server.RequestHandlerClass.seen_keys), "the key was used"
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), f"API key leaked into {path}"
