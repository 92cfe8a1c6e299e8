from __future__ import annotations

import pytest

from mirl.llm.scripted import ScriptedModel, ScriptRanOut
from mirl.llm.types import Model

from .conftest import USER


def test_list_script_in_order_with_word_counts():
    m = ScriptedModel(["first reply", "second one here"])
    assert isinstance(m, Model)
    [a] = m.complete(USER)
    [b] = m.complete(USER)
    assert (a.text, b.text) == ("first reply", "second one here")
    assert a.input_tokens == 7 and a.output_tokens == 2 and b.output_tokens == 3
    assert m.calls == [USER, USER]
    with pytest.raises(ScriptRanOut, match="ran out of replies after 2"):
        m.complete(USER)


def test_function_script_sees_messages_and_n():
    m = ScriptedModel(lambda msgs: f"echo {len(msgs)}")
    outs = m.complete(USER + [{"role": "assistant", "content": "x"}], n=3)
    assert [c.text for c in outs] == ["echo 2"] * 3


def test_cycle_and_exceptions():
    m = ScriptedModel([ValueError("boom"), "ok"], cycle=True)
    with pytest.raises(ValueError):
        m.complete(USER)
    assert m.complete(USER)[0].text == "ok"
    with pytest.raises(ValueError):
        m.complete(USER)


def test_bad_script_is_a_clear_error():
    with pytest.raises(TypeError, match="list of replies"):
        ScriptedModel("just one string")


def test_through_client(scripted, make_client):
    _, name = scripted(["a b c", "d e"])
    client = make_client({"teacher": name})
    outs = client.complete("teacher", USER, n=2)
    assert [c.text for c in outs] == ["a b c", "d e"]
    assert [c.sample_index for c in outs] == [0, 1]
    assert client.model("teacher").name == name
    assert isinstance(client.model("teacher"), Model)


def test_provider_survives_a_reset_of_litellms_map(scripted, make_client):
    import litellm

    _, name = scripted(["still here"])
    client = make_client({"policy": name})
    litellm.custom_provider_map = []  # e.g. another library configuring its own providers
    assert client.complete("policy", USER)[0].text == "still here"


def test_tool_call_replies_directly_and_through_client(scripted, make_client):
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls -la"}'}}
    reply = {"content": "", "tool_calls": [call]}
    [direct] = ScriptedModel([reply]).complete(USER)
    assert direct.tool_calls == [call] and direct.finish_reason == "tool_calls"
    _, name = scripted([reply])
    [c] = make_client({"policy": name}).complete("policy", USER)
    assert c.tool_calls[0]["function"]["name"] == "bash"
    assert c.tool_calls[0]["function"]["arguments"] == '{"command": "ls -la"}'
    assert c.output_tokens == 3
