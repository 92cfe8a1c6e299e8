"""Localizers: rule detectors on the proposed step, an LLM through the client, and both."""

from __future__ import annotations

import json

import pytest
from agent_doubles import make_task

from mirl.llm.client import LLMClient
from mirl.llm.config import LLMConfig, RoleConfig
from mirl.llm.errors import LLMError
from mirl.llm.scripted import ScriptedModel, register, unregister
from mirl.records.trajectory import Step
from mirl.roles.localizer import EitherLocalizer, LLMLocalizer, RuleLocalizer


def test_rules_flag_retry_after_failure(tmp_path):
    history = [Step("", "python3 tool.py", "Traceback: missing config\n", 1)]
    v = RuleLocalizer().judge(make_task(tmp_path), history, Step("again", "python3 tool.py"))
    assert v.bad and v.source == "rules:retry-unchanged-after-failure"


def test_rules_pass_a_fresh_look(tmp_path):
    history = [Step("", "python3 tool.py", "Traceback: missing config\n", 1)]
    v = RuleLocalizer().judge(make_task(tmp_path), history, Step("look", "ls -la config/"))
    assert not v.bad and v.source == "rules"


def test_rules_flag_missing_command(tmp_path):
    v = RuleLocalizer().judge(make_task(tmp_path), [], Step("I think", None))
    assert v.bad and "no-runnable-command" in v.source


@pytest.fixture
def llm_client(tmp_path):
    made = []

    def make(replies):
        model = ScriptedModel(replies, name=f"loc{len(made)}")
        made.append(model.name)
        cfg = LLMConfig(localizer=RoleConfig(model=register(model)), cache=False)
        return LLMClient(cfg, run_dir=tmp_path, stage="profiling"), model

    yield make
    for name in made:
        unregister(name)


GOOD = 'Looks fine.\n```json\n{"command_seen": "lists files", "reason": "inspects first", "verdict": "good"}\n```'
BAD = 'Reasoning...\n{"command_seen": "deletes data", "reason": "acts before looking", "verdict": "bad"}'


def test_llm_localizer_reads_json_in_order(tmp_path, llm_client):
    client, model = llm_client([BAD])
    v = LLMLocalizer(client).judge(make_task(tmp_path), [Step("", "ls", "a\n", 0)], Step("go", "rm -rf a"))
    assert v.bad and v.reason == "acts before looking" and v.command_seen == "deletes data"
    assert v.source.startswith("llm:scripted/")
    prompt = model.calls[0][-1]["content"]
    assert "rm -rf a" in prompt and "### Step 0" in prompt and "Create /app/hello.txt" in prompt


def test_llm_localizer_reasks_invalid_json(tmp_path, llm_client):
    client, model = llm_client(["no json here", '{"verdict": "maybe"}', GOOD])
    v = LLMLocalizer(client).judge(make_task(tmp_path), [], Step("", "ls"))
    assert not v.bad and len(model.calls) == 3
    rows = [json.loads(line) for line in (tmp_path / "llm_calls.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and {r["role"] for r in rows} == {"localizer"}


def test_llm_localizer_gives_up_and_records(tmp_path, llm_client):
    client, _ = llm_client(["nope", "still nope", "never"])
    with pytest.raises(LLMError) as err:
        LLMLocalizer(client).judge(make_task(tmp_path), [], Step("", "ls"))
    assert err.value.kind == "invalid_json" and err.value.tries == 3
    rows = [json.loads(line) for line in (tmp_path / "llm_calls.jsonl").read_text().splitlines()]
    # three asks, then one row for the failure itself
    assert [r["error"] is None for r in rows] == [True, True, True, False]
    assert rows[-1]["error"].startswith("invalid_json: no valid JSON after 3 ask(s)")


def test_either_keeps_every_source(tmp_path, llm_client):
    client, _ = llm_client([BAD])
    v = EitherLocalizer([RuleLocalizer(), LLMLocalizer(client)]).judge(make_task(tmp_path), [], Step("", None))
    assert v.bad
    assert {f["source"].split(":")[0] for f in v.flags} == {"rules", "llm"}
