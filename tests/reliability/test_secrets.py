"""Secrets: an API key given through the environment appears in no file of runs/ or reports/ (records,
ledger, cache, executed notebooks, HTML, logs), nor in what the batch prints, even when the server
quotes it back in an error.

`mirl batch --to 02` on the real notebooks, with every LLM role (policy, localizer, annotator) at a
local OpenAI-compatible server that checks the key arrives and quotes it back in two errors, one of
which fails stage 02 with a traceback; on bubblewrap, one task, one seed.
"""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import pytest
import yaml

from mirl.batch import BatchSpec, run_batch
from tests.conftest import require_bwrap
from tests.fakes.annotator import SYSTEM_MARK
from tests.reliability import crash_driver
from tests.reliability.fault_server import FaultServer

REPO = Path(__file__).resolve().parents[2]


def files_with(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in sorted(root.rglob("*")) if p.is_file() and needle in p.read_bytes()]


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.timeout(900)
def test_a_canary_key_lands_in_no_output_of_the_batch(tmp_path, mirl_kernel, monkeypatch, capfd):
    require_bwrap()
    canary = f"sk-canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("MIRL_CANARY_KEY", canary)
    monkeypatch.setenv("OPENAI_API_KEY", canary)  # also where litellm would look by itself
    # the first request fails with the key quoted back (as some providers' errors do) and is retried; the
    # annotator's first request is refused the same way (401: not retried), so stage 02 fails with a traceback
    def plan(i: int, body: dict):
        if i == 0:
            return ("echo", 500)
        if SYSTEM_MARK in str(body["messages"][0].get("content")):
            return ("echo", 401)
        return None

    with FaultServer(plan, reply=crash_driver.reply) as server:
        role = {"api_base": server.url, "api_key_env": "MIRL_CANARY_KEY", "max_tokens": 64}
        params = {
            "models": {"policy": {"model": "openai/canary-policy", **role},
                       "localizer": {"model": "openai/canary-localizer", **role},
                       "annotator": {"model": "openai/canary-annotator", **role},
                       "backoff_s": 0.01, "prices": {"openai/canary-policy": {"input": 1.0, "output": 1.0}}},
            "sandbox": {"backend": "bwrap"}, "agent": {"max_steps": 4},
            "profiling": {"tasks": str(REPO / "tasks"), "max_tasks": 1, "seeds": 1, "workers": 1, "localizer": "llm"},
            "taxonomy": {"annotator": "llm", "threshold": 0.01},
        }
        path = tmp_path / "canary.yaml"
        path.write_text(yaml.safe_dump(params))
        spec = BatchSpec(params_file=path, run_name="canary", notebooks_dir=REPO / "notebooks",
                         runs_root=tmp_path / "runs", reports_root=tmp_path / "reports", cell_timeout_s=600,
                         last="02", line_every_s=5)
        out = io.StringIO()
        outcome = run_batch(spec, out=out)
    printed = capfd.readouterr()
    assert not outcome.ok and "02_taxonomy_review" in outcome.message and "auth" in outcome.message, outcome.message
    assert outcome.ran == ["profiling"]
    assert [kind for _, kind in server.faults].count("echo") >= 2 and len(server.served) >= 4
    assert set(server.keys) == {f"Bearer {canary}"}  # the key was really sent, with every request
    run, reports = tmp_path / "runs" / "canary", tmp_path / "reports" / "canary"
    assert (reports / "logs" / "taxonomy.log").exists() and (reports / "02_taxonomy_review.ipynb").exists()
    executed = (reports / "02_taxonomy_review.ipynb").read_text()
    assert '"output_type": "error"' in executed and "auth" in executed  # the error and its traceback are there
    assert (run / "llm_calls.jsonl").exists() and (run / "llm_cache").exists()
    needle = canary.encode()
    assert files_with(run, needle) == [] and files_with(reports, needle) == []
    assert files_with(tmp_path, needle) == []  # the params file names the variable, not the key
    assert canary not in out.getvalue() + printed.out + printed.err
    # and not a recognizable piece of it either (the part after the fixed prefix)
    assert files_with(tmp_path, canary[-16:].encode()) == []
