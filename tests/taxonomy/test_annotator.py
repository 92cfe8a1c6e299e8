"""The annotator's replies: schema and id rules, re-asking, and a recorded failure for non-JSON."""

from __future__ import annotations

import json

import pytest

from mirl.llm.client import LLMClient
from mirl.llm.config import with_model
from mirl.llm.errors import LLMError
from mirl.llm.ledger import read_ledger
from mirl.llm.scripted import ScriptedModel, register, unregister
from mirl.records.error_step import ErrorStep
from mirl.records.taxonomy import ErrorType
from mirl.roles.annotator import LLMAnnotator, check_assignments, check_propose, cut, example_fields

IDS = ["t/0/1", "t/0/2", "t/1/0"]


def step(i):
    env, seed, idx = i.split("/")
    return ErrorStep(env=env, seed=int(seed), step=int(idx), rejected_command="cat " + "x" * 500,
                     reason=f"reason {i}", description="prints a file")


def propose(types, unassigned):
    return {"types": types, "unassigned": unassigned}


def test_propose_rules():
    ok = propose([{"name": "acts without looking", "definition": "d", "example_ids": ["t/0/1", "t/0/2"]},
                  {"name": "prints binary as text", "definition": "d", "example_ids": ["t/0/2"]}],
                 [{"id": "t/1/0", "reason": "one_off"}])
    assert check_propose(IDS)(ok) == []  # an example may fit several types
    bad = propose([{"name": "cat", "definition": "d", "example_ids": ["t/0/1", "zz"]}],
                  [{"id": "t/0/1", "reason": "unclear"}, {"id": "t/1/0", "reason": "one_off"},
                   {"id": "t/1/0", "reason": "one_off"}])
    problems = " | ".join(check_propose(IDS)(bad))
    assert "'zz' is not one of the examples" in problems and "'t/0/2' is missing" in problems
    assert "'t/0/1' is both assigned and unassigned" in problems and "'t/1/0' appears more than once" in problems
    assert "'cat' must have 2-5 words" in problems


def test_assignment_rules():
    check = check_assignments(IDS, ["acts without looking"], allow_new=True)
    good = {"assignments": [{"id": "t/0/1", "types": ["acts without looking"]},
                            {"id": "t/0/2", "types": ["kills by broad name"]}],
            "unassigned": [{"id": "t/1/0", "reason": "new_pattern"}],
            "new_types": [{"name": "kills by broad name", "definition": "d", "example_ids": ["t/0/2"]}]}
    assert check(good) == []
    bad = {"assignments": [{"id": "t/0/1", "types": ["made up type"]}, {"id": "t/0/1", "types": []}],
           "unassigned": [{"id": "t/1/0", "reason": "one_off"}],
           "new_types": [{"name": "Acts Without Looking", "definition": "d", "example_ids": []}]}
    problems = " | ".join(check(bad))
    assert "unknown type 'made up type'" in problems and "'t/0/1' appears more than once" in problems
    assert "'t/0/2' is missing" in problems and "restates an existing type" in problems
    assert "assigned no type" in problems


def test_fields_shown_to_the_annotator():
    f = example_fields(step("t/0/1"), max_command_chars=60)
    assert set(f) == {"id", "command", "description", "reason"} and len(f["command"]) <= 60
    assert f["command"].startswith("cat xxx") and "[cut]" in f["command"]
    assert cut(None, 50) == "(no runnable command)"


@pytest.fixture
def client(tmp_path):
    def make(replies):
        model = ScriptedModel(replies, name=f"annotator-{tmp_path.name}")
        cfg = with_model(annotator=register(model))
        cfg.json_tries = 3
        return LLMClient(cfg, run_dir=tmp_path, stage="taxonomy"), model
    yield make
    unregister(f"annotator-{tmp_path.name}")


def test_bad_ids_are_reasked_then_accepted(client, tmp_path):
    wrong = json.dumps(propose([{"name": "acts without looking", "definition": "d", "example_ids": ["t/0/1"]}], []))
    right = json.dumps(propose([{"name": "acts without looking", "definition": "d", "example_ids": IDS}], []))
    c, model = client([wrong, right])
    out = LLMAnnotator(c).propose([step(i) for i in IDS])
    assert out["types"][0]["example_ids"] == IDS
    assert "is missing" in model.calls[1][-1]["content"]  # the re-ask says what was wrong
    assert len(read_ledger(tmp_path)) == 2


def test_a_reply_that_is_not_json_is_reasked_then_recorded_as_a_failure(client, tmp_path):
    c, model = client(["I think these are all fine.", "Sure!", "no"])
    with pytest.raises(LLMError) as e:
        LLMAnnotator(c).label([ErrorType("acts without looking", "d")], [step(i) for i in IDS], {})
    assert e.value.kind == "invalid_json" and len(model.calls) == 3
    ledger = read_ledger(tmp_path)
    assert ledger["error"].str.startswith("invalid_json").sum() == 1
