"""A spend cap stops the profiling stage cleanly, and a rerun with a higher cap finishes the work.

The localizer is a priced LLM behind a local OpenAI-compatible server, so the budget is checked on
the real path: litellm's price map -> the ledger -> the client's check before each request.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import litellm
import pytest
from agent_doubles import FakeSandbox

from mirl.llm.ledger import read_ledger
from mirl.llm.scripted import ScriptedModel
from mirl.params import make
from mirl.profiling.stage import run_profiling
from mirl.tasks import load_task
from tests.fakes.openai_server import Usage, serve

REPO = Path(__file__).resolve().parents[2]
TASKS = ["count-lines", "fix-permissions", "dedupe-sort-list"]
PER_CALL = 0.001  # 1000 prompt tokens at $1 per million, nothing else
GOOD = '{"command_seen": "a shell command", "reason": "looks fine", "verdict": "good"}'


def policy_step(messages):
    """ls, pwd, then submit: three steps, so three localizer calls, per episode."""
    steps = sum(m["role"] == "assistant" for m in messages)
    return ["```bash\nls\n```", "```bash\npwd\n```", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"][steps]


@pytest.fixture
def localizer():
    """(model name priced in litellm's map, server URL, request bodies the server received)."""
    model = f"openai/mirl-budget-{uuid.uuid4().hex[:8]}"  # unique: no cache from another run can answer
    litellm.register_model({model: {"input_cost_per_token": PER_CALL / 1000, "output_cost_per_token": 0.0,
                                    "litellm_provider": "openai", "mode": "chat"}})
    server, url = serve(reply=lambda body: (GOOD, Usage(prompt=1000, completion=0)))
    yield model, url, server.RequestHandlerClass.requests
    server.shutdown()
    server.server_close()


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "profiling" / "trajectories.jsonl").read_text().splitlines()]


def test_budget_stops_the_stage_and_a_rerun_continues(tmp_path, localizer, monkeypatch):
    model, url, requests = localizer
    monkeypatch.setenv("MIRL_TEST_KEY", "sk-budget-test-000000")
    tasks = [load_task(REPO / "tasks" / t) for t in TASKS]

    def run(budget):
        p = make(profiling={"seeds": 1, "workers": 1, "localizer": "llm", "budget_usd": budget},
                 agent={"max_steps": 6},
                 models={"localizer": {"model": model, "api_base": url, "api_key_env": "MIRL_TEST_KEY"}})
        return run_profiling(p, tmp_path, tasks=tasks, sandbox=FakeSandbox(), policy=ScriptedModel(policy_step),
                             progress=False)

    # $0.0035 allows 4 calls (checked before each): episode 1 takes 3, episode 2 one, its 2nd step is refused
    summary = run(0.0035)
    first = records(tmp_path)
    # the episode the cap interrupted is not recorded at all (unfinished), and no third one started
    assert [(r["task"], r["exit_reason"]) for r in first] == [(TASKS[0], "submitted")]
    assert summary["stopped"].startswith("BudgetExceeded") and not summary["complete"]
    assert summary["planned"] - summary["done"] == 2
    assert summary["episodes"] == 1 and summary["exit_reasons"] == {"submitted": 1}
    assert summary["steps"] == 3 and summary["llm"]["localizer"]["cost_usd"] == pytest.approx(4 * PER_CALL)
    assert len(requests) == 4
    ledger = read_ledger(tmp_path)
    assert list(ledger["error"].fillna("").str.split(":").str[0]) == ["", "", "", "", "budget"]

    # a higher cap: the finished episode is kept as it was, the stopped one and the unplayed one are played
    summary = run(1.0)
    again = records(tmp_path)
    assert again[0] == first[0]
    assert sorted((r["task"], r["exit_reason"]) for r in again) == sorted((t, "submitted") for t in TASKS)
    assert summary["episodes"] == 3 and summary["complete"] and summary["steps"] == 9
    # each paid call once: episode 2's first localizer call is served from the cache on the replay
    assert len(requests) == 9
    ledger = read_ledger(tmp_path)
    paid = ledger[(ledger["cost_usd"] > 0)]
    assert len(paid) == 9 and ledger["cost_usd"].sum() == pytest.approx(9 * PER_CALL)
    assert ledger["cache_hit"].fillna(False).astype(bool).sum() == 1
    assert set(ledger["stage"]) == {"profiling"}
