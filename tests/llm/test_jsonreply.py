"""JSON replies: extraction, validation, re-asking, and recorded failure."""

from __future__ import annotations

import pytest

from mirl.llm.errors import LLMError
from mirl.llm.jsonreply import JSONReplyError, extract_json, parse_reply, validate
from mirl.llm.ledger import read_ledger

from .conftest import USER

VERDICT = {
    "type": "object",
    "required": ["verdict", "reason"],
    "properties": {"verdict": {"type": "string", "enum": ["good", "bad"]}, "reason": {"type": "string"},
                   "ids": {"type": "array", "items": {"type": "integer"}}},
}


def test_extract_last_object_from_fences_and_prose():
    text = 'Draft: {"verdict": "bad"}\nFinal answer:\n```json\n{"verdict": "good", "reason": "uses {braces}"}\n```\nDone.'
    assert extract_json(text) == {"verdict": "good", "reason": "uses {braces}"}
    assert extract_json("ids: [1, 2] then [3]", kind="array") == [3]
    with pytest.raises(JSONReplyError, match="no JSON object"):
        extract_json("I think the step is fine.")


def test_validate_types_required_enums():
    assert validate({"verdict": "good", "reason": "r", "ids": [1, 2]}, VERDICT) == []
    errs = validate({"verdict": "maybe", "ids": [1, "x", True]}, VERDICT)
    assert any("missing required field 'reason'" in e for e in errs)
    assert any("$.verdict must be one of" in e for e in errs)
    assert any("$.ids[1] must be integer" in e for e in errs)
    assert any("$.ids[2] must be integer" in e for e in errs)  # a bool is not an integer
    strict = {"type": "object", "properties": {"a": {"type": "number"}}, "additionalProperties": False}
    assert validate({"a": 1, "b": 2}, strict) == ["$ has unexpected field(s) ['b']; allowed: ['a']"]
    with pytest.raises(ValueError, match="unsupported keyword"):
        validate({}, {"type": "object", "pattern": "x"})


def test_parse_reply_names_the_problem():
    with pytest.raises(JSONReplyError, match="missing required field 'reason'"):
        parse_reply('{"verdict": "good"}', VERDICT)


def test_reask_invalid_then_valid(scripted, make_client):
    model, name = scripted(["The step looks fine.", '{"verdict": "maybe", "reason": "?"}',
                            'Sure:\n```json\n{"verdict": "good", "reason": "lists files"}\n```'])
    client = make_client({"localizer": name})
    value = client.complete_json("localizer", USER, VERDICT)
    assert value == {"verdict": "good", "reason": "lists files"}
    assert len(model.calls) == 3
    last = model.calls[-1]
    assert last[-2] == {"role": "assistant", "content": '{"verdict": "maybe", "reason": "?"}'}
    assert "must be one of" in last[-1]["content"] and last[-1]["role"] == "user"
    # rerunning costs nothing: the whole conversation is cached
    assert client.complete_json("localizer", USER, VERDICT) == value and len(model.calls) == 3


def test_always_invalid_is_a_recorded_failure(scripted, make_client):
    model, name = scripted(["nope", "still nope", "no json here either", "unused"])
    client = make_client({"behavior_judge": name})
    with pytest.raises(LLMError) as err:
        client.complete_json("behavior_judge", USER, VERDICT, tries=3)
    assert err.value.kind == "invalid_json" and len(model.calls) == 3
    errors = read_ledger(client.run_dir)["error"].dropna()
    assert len(errors) == 1 and errors.iloc[0].startswith("invalid_json: no valid JSON after 3 ask(s)")


def test_complete_with_schema_parses_each_sample(scripted, make_client):
    _, name = scripted(['{"verdict": "good", "reason": "a"}', '{"verdict": "bad", "reason": "b"}'])
    client = make_client({"step_judge": name})
    outs = client.complete("step_judge", USER, n=2, schema=VERDICT)
    assert [c.parsed["verdict"] for c in outs] == ["good", "bad"]


def test_a_reply_cut_inside_its_last_json_value_is_not_read_from_an_earlier_draft():
    # a reply cut at max_tokens: the final object is unfinished, the complete one before it a superseded draft
    cut = ('Draft: {"verdict": "good", "reason": "r"}\nOn reflection the final answer is:\n'
           '{"verdict": "bad", "reason": "it deletes the fil')
    with pytest.raises(JSONReplyError, match="unfinished JSON"):
        extract_json(cut)
    # nor from a complete object nested inside the unfinished one
    with pytest.raises(JSONReplyError, match="unfinished JSON"):
        parse_reply('{"reason": "see {\\"a\\": 1} and', {"type": "object"})
    with pytest.raises(JSONReplyError, match="unfinished JSON"):
        extract_json('{"verdict": "bad", "ids": [1, 2', kind="any")
    # braces of prose after a complete answer, and complete but invalid JSON, are not a cut value
    assert extract_json('{"verdict": "good", "reason": "r"} (a set {x} would be {') == {"verdict": "good", "reason": "r"}
    assert extract_json('{"verdict": "good"} then {"a": 1,}') == {"verdict": "good"}


def test_a_cut_reply_is_re_asked_then_a_recorded_failure(scripted, make_client):
    cut = 'Draft {"verdict": "good", "reason": "r"} final {"verdict": "bad", "reason": "the comm'
    model, name = scripted([cut, cut, cut])
    client = make_client({"localizer": name})
    with pytest.raises(LLMError) as err:
        client.complete_json("localizer", USER, VERDICT, tries=2)
    assert err.value.kind == "invalid_json" and len(model.calls) == 2
    assert "unfinished JSON" in model.calls[-1][-1]["content"]
