"""LLM faults on the real HTTP path: litellm talks to a local server that fails on purpose.

A real stage role (the LLM taxonomy annotator) meets rate limits, 5xx, a timeout, a cut-off response
body, non-JSON and truncated-JSON replies, and replies with wrong or missing example ids: each is
retried or re-asked within its bound, the stage completes with the same labels as against a healthy
server, and the ledger bills exactly the replies the server sent. An endpoint that only hangs ends in
a bounded, recorded failure. Processes sharing one ledger stop at the budget cap, overspending it by
at most one call per worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mirl.llm.errors import LLMError
from mirl.params import make
from mirl.records import ErrorStep
from mirl.records.taxonomy import TaxonomyStore
from mirl.taxonomy.stage import run_taxonomy
from tests.fakes.annotator import SYSTEM_MARK, annotator_reply
from tests.fakes.openai_server import role_reply
from tests.reliability.fault_server import FaultServer

REPO = Path(__file__).resolve().parents[2]
MODEL = "openai/fault-annotator"
PRICE = {"input": 1000.0, "output": 2000.0}  # USD per million tokens

pytestmark = pytest.mark.timeout(240)


def reply(body: dict) -> str:
    """The annotator's answer to the first prompt of the conversation (a re-ask repeats the question)."""
    msgs = body.get("messages", [])
    system = next((m["content"] for m in msgs if m.get("role") == "system"), "")
    if SYSTEM_MARK in system:
        return annotator_reply(next(m["content"] for m in msgs if m.get("role") == "user"))
    return role_reply(body)


def wrong_id(text: str) -> str:
    value = json.loads(text)
    if value.get("assignments"):
        value["assignments"][0]["id"] = "no-such-env/0/0"
    else:
        value["types"][0]["example_ids"][0] = "no-such-env/0/0"
    return json.dumps(value)


def missing_id(text: str) -> str:
    value = json.loads(text)
    if value.get("assignments"):
        value["assignments"].pop(0)
    else:
        value["types"][0]["example_ids"].pop(0)
    return json.dumps(value)


# request number -> fault; each call stays within max_tries transient failures and json_tries asks
PLAN = {0: ("status", 429), 1: ("status", 500), 2: ("text", "Sorry, I can only answer in prose."),
        3: ("hang", 3.0), 4: ("text", '{"types": [{"name": "acts wi'), 5: ("cut",),
        7: ("status", 503), 8: ("edit", wrong_id), 9: ("edit", missing_id)}
TRANSIENT = ("status", "hang", "cut")


def error_steps(path: Path) -> Path:
    steps = [ErrorStep(env=f"env{i % 3}", seed=0, step=i, rejected_command=None if i % 2 else f"rm -rf /{i}",
                       reason=f"reason {i}") for i in range(9)]
    path.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in steps))
    return path


def params(steps: Path, url: str, **models):
    return make(taxonomy={"annotator": "llm", "error_steps": str(steps), "batch_size": 4, "label_batch_size": 4,
                          "threshold": 0.1, "workers": 1},
                models={"annotator": {"model": MODEL, "api_base": url, "api_key_env": "MIRL_FAULT_KEY",
                                      "timeout_s": 1.0},
                        "backoff_s": 0.01, "jitter": 0.0, "prices": {MODEL: PRICE}, **models})


def ledger(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "llm_calls.jsonl").read_text().splitlines()]


def labels(run: Path) -> list[tuple]:
    store = TaxonomyStore(run / "taxonomy")
    [version] = store.versions()
    return sorted((lb.id, tuple(lb.types), lb.unassigned) for lb in store.load_labels(version))


def billed(served: list[dict]) -> float:
    return sum(s["prompt_tokens"] * PRICE["input"] + s["completion_tokens"] * PRICE["output"] for s in served) / 1e6


def test_every_fault_kind_is_retried_or_reasked_and_billed_once(tmp_path, monkeypatch):
    monkeypatch.setenv("MIRL_FAULT_KEY", "sk-fault-test-key-123456")
    steps = error_steps(tmp_path / "error_steps.jsonl")
    with FaultServer(reply=reply) as clean:
        expected = run_taxonomy(params(steps, clean.url), tmp_path / "clean", progress=False)
    with FaultServer(PLAN, reply=reply) as server:
        summary = run_taxonomy(params(steps, server.url), tmp_path / "faulty", progress=False)
    assert sorted(n for n, _ in server.faults) == sorted(PLAN), server.faults  # every fault was met
    assert summary["complete"] and summary["lost"] == 0 and summary["kept"] == expected["kept"]
    assert labels(tmp_path / "faulty") == labels(tmp_path / "clean")
    rows = ledger(tmp_path / "faulty")
    paid = [r for r in rows if not r["cache_hit"]]
    # one ledger row per reply the server sent (each billed once), none for the failed attempts
    assert len(paid) == len(server.served) == server.count - sum(kind in TRANSIENT for _, kind in server.faults)
    assert sum(r["cost_usd"] for r in paid) == pytest.approx(billed(server.served))
    assert sum(r["input_tokens"] for r in paid) == sum(s["prompt_tokens"] for s in server.served)
    # the transient failures are recorded as tries of the request that got through
    assert sum(r["tries"] - 1 for r in paid) == sum(kind in TRANSIENT for _, kind in server.faults)
    assert [r["tries"] for r in paid][:4] == [3, 2, 2, 2]  # 429+500, hang, cut, 503 before their replies
    assert all(r["error"] is None for r in paid)
    assert summary["llm"]["annotator"]["calls"] == len(rows)


def test_an_endpoint_that_hangs_ends_in_one_recorded_bounded_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("MIRL_FAULT_KEY", "sk-fault-test-key-123456")
    steps = error_steps(tmp_path / "error_steps.jsonl")
    run = tmp_path / "run"
    with FaultServer(lambda i, body: ("hang", 4.0), reply=reply) as server:
        with pytest.raises(LLMError) as err:
            run_taxonomy(params(steps, server.url, max_tries=3), run, progress=False)
    assert err.value.kind == "timeout" and err.value.tries == 3
    assert server.count == 3 and server.served == []
    [row] = ledger(run)
    assert row["error"].startswith("timeout: ") and row["tries"] == 3 and row["cost_usd"] == 0.0
    # the same command against a healthy endpoint completes
    with FaultServer(reply=reply) as healthy:
        summary = run_taxonomy(params(steps, healthy.url, max_tries=3), run, progress=False)
    assert summary["complete"] and len(labels(run)) == 9


WORKER = textwrap.dedent("""
    import sys, threading
    from mirl.llm.client import LLMClient
    from mirl.llm.config import LLMConfig, RoleConfig
    from mirl.llm.errors import BudgetExceeded
    url, run, proc = sys.argv[1], sys.argv[2], sys.argv[3]
    cfg = LLMConfig(annotator=RoleConfig(model="openai/fault-annotator", api_base=url, api_key_env="MIRL_FAULT_KEY"),
                    prices={"openai/fault-annotator": {"input": 0.0, "output": 10000.0}},
                    stage_budget_usd={"taxonomy": 0.10}, cache=False, backoff_s=0.01)
    client = LLMClient(cfg, run_dir=run, stage="taxonomy")
    stops = []
    def work(t):
        for k in range(1000):
            try:
                client.complete("annotator", [{"role": "user", "content": f"call {proc}-{t}-{k}"}])
            except BudgetExceeded:
                stops.append(t)
                return
    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    print("stopped", len(stops))
""")


def test_processes_sharing_a_ledger_overspend_the_cap_by_at_most_one_call_each(tmp_path, monkeypatch):
    monkeypatch.setenv("MIRL_FAULT_KEY", "sk-fault-test-key-123456")
    run, procs, threads, per_call, cap = tmp_path / "run", 3, 2, 0.01, 0.10
    with FaultServer(reply=lambda body: "ok", delay_s=0.05) as server:
        workers = [subprocess.Popen([sys.executable, "-c", WORKER, server.url, str(run), str(p)], cwd=REPO,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in range(procs)]
        outs = [w.communicate(timeout=180) for w in workers]
    assert all(w.returncode == 0 for w in workers), [e[-2000:] for _, e in outs]
    assert all(o.strip() == f"stopped {threads}" for o, _ in outs), outs  # every worker hit the cap
    paid = [r for r in ledger(run) if r["cost_usd"]]
    assert len(paid) == len(server.served)  # each paid call counted once
    spent = sum(r["cost_usd"] for r in paid)
    assert cap <= spent + 1e-9 <= cap + procs * threads * per_call + 1e-9, (spent, len(paid))
