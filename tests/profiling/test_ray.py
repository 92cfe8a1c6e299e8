"""The profiling stage on a Ray cluster: the same code path as local workers, hooks shipped by pickle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirl.params import make
from mirl.profiling.stage import load_trajectories, run_profiling
from tests.fakes.openai_server import serve
from tests.real import missing

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_profiling_on_a_local_ray_cluster(tmp_path, monkeypatch):
    from mirl.sandbox import bwrap_backend

    try:
        import ray
    except ImportError:
        missing("Ray", "pip install 'mirl[test]' (or 'mirl[ray]')")  # the test extra installs it
    if not bwrap_backend.available():
        missing("bubblewrap or the base root filesystem", "`apt-get install bubblewrap`, then `mirl image build`")
    server, url = serve()
    monkeypatch.setenv("MIRL_TEST_API_KEY", "sk-ray-test-000000000")
    p = make(profiling={"tasks": str(REPO / "tasks"), "max_tasks": 2, "seeds": 2, "workers": 2, "ray_address": "local"},
             sandbox={"backend": "bwrap"}, agent={"max_steps": 5},
             models={"policy": {"model": "openai/test-policy", "api_base": url, "api_key_env": "MIRL_TEST_API_KEY"}})
    try:
        summary = run_profiling(p, tmp_path)
        assert ray.is_initialized()
    finally:
        ray.shutdown()
        server.shutdown()
    trajectories = load_trajectories(tmp_path)
    assert sorted((t["task"], t["seed"]) for t in trajectories) == sorted(
        (t, s) for t in {t["task"] for t in trajectories} for s in (0, 1))
    assert summary["episodes"] == 4 and set(summary["exit_reasons"]) <= {"submitted", "discarded"}
    assert all(t["models"]["policy"] == "openai/test-policy" and t["models"]["localizer"] == "rules"
               for t in trajectories)
    # every episode ran its commands in a real sandbox on a Ray worker
    assert all(any(s["command"] == "pwd" and s["output"].strip() for s in t["steps"]) for t in trajectories
               if t["exit_reason"] == "submitted")
    ledger = [json.loads(line) for line in (tmp_path / "llm_calls.jsonl").read_text().splitlines()]
    assert ledger and all(r["role"] == "policy" for r in ledger)
