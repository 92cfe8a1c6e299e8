"""Notebook 01 headless through papermill, with LLM roles answered by a local OpenAI-compatible server."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from mirl.notebook import RunSpec, execute, resolve_parameters
from mirl.typed import ParamsError
from tests.fakes.openai_server import serve
from tests.real import missing

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "01_profiling.ipynb"
SECRET = "sk-test-secret-0123456789abcdef"


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


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
        missing("bubblewrap or the base root filesystem", "`apt-get install bubblewrap`, then `mirl image build`")
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
    # the per-environment table the overview draws, from the run's trajectories and error steps
    trajectories = jsonl(run / "profiling" / "trajectories.jsonl")
    per_env = {r["env"]: r for r in csv.DictReader((tmp_path / "reports" / "llm" / "profiling_per_env.csv").open())}
    assert set(per_env) == {t["task"] for t in trajectories}
    for t in trajectories:
        row = per_env[t["task"]]
        assert int(row["steps"]) == len(t["steps"]), (row, t["task"])
        assert int(row["flags"]) == sum(e["env"] == t["task"] for e in errors), row
    executed = json.loads(out.read_text())
    assert not any(o.get("output_type") == "error" for c in executed["cells"] for o in c.get("outputs", []))
    assert any(f"Bearer {SECRET}" == k for k in server.RequestHandlerClass.seen_keys), "the key was used"
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), f"API key leaked into {path}"


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.timeout(900)
def test_notebook_on_its_defaults(tmp_path):
    """The path a new user runs: SmolLM2 policy, rule localizer, reference teacher, on bubblewrap.

    Only the size is overridden (2 tasks, 1 seed, 2 steps, 64 tokens per reply). Every output is checked against what
    is computed here from the trajectories and the ledger the run wrote."""
    from mirl.sandbox import bwrap_backend
    from tests.engines.smollm2 import require_smollm2

    require_smollm2()
    if not bwrap_backend.available():
        missing("bubblewrap or the base root filesystem", "`apt-get install bubblewrap`, then `mirl image build`")
    overrides = {"profiling.tasks": str(REPO / "tasks"), "profiling.max_tasks": 2, "profiling.seeds": 1,
                 "agent.max_steps": 2, "sandbox.backend": "bwrap", "models.policy.max_tokens": 64}
    spec = RunSpec(notebook=NOTEBOOK, run_name="defaults", overrides=overrides, runs_root=tmp_path / "runs",
                   reports_root=tmp_path / "reports", cell_timeout_s=800)
    _, typed = resolve_parameters(spec)
    assert (typed.models.policy.model, typed.profiling.localizer, typed.profiling.teacher) == (
        "local/smollm2", "rules", "reference")
    out = execute(spec)
    executed = json.loads(out.read_text())
    assert not any(o.get("output_type") == "error" for c in executed["cells"] for o in c.get("outputs", []))

    run, reports = tmp_path / "runs" / "defaults", tmp_path / "reports" / "defaults"
    trajectories = jsonl(run / "profiling" / "trajectories.jsonl")
    first_two = sorted(p.name for p in (REPO / "tasks").iterdir() if (p / "task.toml").exists() or (p / "task.yaml").exists())[:2]
    assert sorted((t["task"], t["seed"]) for t in trajectories) == [(first_two[0], 0), (first_two[1], 0)]
    for t in trajectories:
        assert t["models"] == {"policy": "local/smollm2", "localizer": "rules", "teacher": "reference-solution"}
        assert t["sandbox"].startswith("bwrap") and 1 <= len(t["steps"]) <= 2
        assert t["exit_reason"] in ("submitted", "step_limit", "discarded", "token_limit", "agent_timeout")
        ran = [s for s in t["steps"] if s["command"] is not None]
        assert all(s["exit_code"] is not None for s in ran), "every command ran in the sandbox"

    # error steps: one per flagged step (corrections carry the flag, discards keep the rejected step)
    expected = []
    for t in trajectories:
        for i, s in enumerate(t["steps"]):
            if "flag" in s["meta"]:
                expected.append((t["task"], t["seed"], i, s["meta"]["flag"]["rejected_command"], s["command"]))
        d = t["meta"].get("discarded_step")
        if d and "flag" in d["meta"]:
            expected.append((t["task"], t["seed"], len(t["steps"]), d["meta"]["flag"]["rejected_command"], None))
    errors = jsonl(run / "profiling" / "error_steps.jsonl")
    got = [(e["env"], e["seed"], e["step"], e["rejected_command"], e["correction"]) for e in errors]
    assert sorted(got, key=str) == sorted(expected, key=str)

    # the summary, recomputed
    steps = sum(len(t["steps"]) - t["prefix_len"] for t in trajectories)
    rewards = [t["reward"] for t in trajectories if t["reward"] is not None]
    summary = json.loads((run / "profiling" / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["environments"] == 2 and summary["steps"] == steps
    assert summary["flags"] == len(expected) and summary["flag_rate"] == round(len(expected) / steps, 4)
    assert summary["exit_reasons"] == dict(Counter(t["exit_reason"] for t in trajectories))
    assert summary["mean_reward"] == (round(sum(rewards) / len(rewards), 4) if rewards else None)
    assert summary["discarded"] == sum(t["exit_reason"] == "discarded" for t in trajectories)

    # the ledger: one embedded policy call per policy proposal, free, with the tokens the steps report
    calls = jsonl(run / "llm_calls.jsonl")
    proposals = [s["meta"].get("proposed", s) for t in trajectories for s in t["steps"] if s["source"] != "teacher"
                 or "proposed" in s["meta"]] + [t["meta"]["discarded_step"] for t in trajectories
                                                 if t["meta"].get("discarded_step")]
    assert {c["role"] for c in calls} == {"policy"} and all(c["price"] == "none" for c in calls)
    assert len(calls) == len(proposals) == summary["llm"]["policy"]["calls"]
    assert sum(c["output_tokens"] for c in calls) == sum(p["output_tokens"] for p in proposals)
    assert sum(c["cost_usd"] for c in calls) == 0

    # the figures and the table the notebook wrote
    png = (reports / "profiling_overview.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    per_env = {r["env"]: r for r in csv.DictReader((reports / "profiling_per_env.csv").open())}
    assert set(per_env) == set(first_two)
    for t in trajectories:
        row = per_env[t["task"]]
        flags = sum(e[0] == t["task"] for e in expected)
        assert int(row["steps"]) == len(t["steps"]) and int(row["flags"]) == flags
