"""Transient failures are retried with backoff; permanent ones fail at once; all are recorded."""

from __future__ import annotations

import random

import litellm
import pytest

from mirl.llm.errors import LLMError
from mirl.llm.ledger import read_ledger

from .conftest import USER


def rate_limit():
    return litellm.RateLimitError("slow down", llm_provider="scripted", model="m")


def server_error():
    return litellm.InternalServerError("upstream 503", llm_provider="scripted", model="m")


def timeout():
    return litellm.Timeout("took too long", model="m", llm_provider="scripted")


def test_transient_errors_then_success(scripted, make_client):
    _, name = scripted([rate_limit(), server_error(), timeout(), "finally"])
    client = make_client({"localizer": name}, max_tries=5, jitter=0.0)
    [c] = client.complete("localizer", USER)
    assert c.text == "finally"
    assert client.slept == pytest.approx([0.01, 0.02, 0.04])  # exponential backoff
    rows = read_ledger(client.run_dir)
    assert len(rows) == 1 and rows.iloc[0]["tries"] == 4 and rows.iloc[0]["error"] is None


def test_backoff_is_capped_and_jittered(scripted, make_client):
    _, name = scripted([rate_limit()] * 5 + ["ok"])
    client = make_client({"localizer": name}, max_tries=6, backoff_s=0.01, backoff_max_s=0.03, jitter=0.5)
    client.complete("localizer", USER)
    draws = random.Random(0)  # the fixture's generator, replayed: wait = min(cap, 0.01 * 2**k) * (1 + 0.5 * u)
    expected = [min(0.03, 0.01 * 2 ** k) * (1 + 0.5 * draws.random()) for k in range(5)]
    assert client.slept == pytest.approx(expected)


def test_auth_error_is_not_retried(scripted, make_client):
    model, name = scripted([litellm.AuthenticationError("bad key", llm_provider="scripted", model="m"), "never"])
    client = make_client({"teacher": name})
    with pytest.raises(LLMError) as err:
        client.complete("teacher", USER)
    assert err.value.kind == "auth" and err.value.tries == 1
    assert client.slept == [] and model.remaining == 1
    row = read_ledger(client.run_dir).iloc[-1]
    assert row["error"].startswith("auth:")


@pytest.mark.parametrize("exc,kind", [
    (litellm.NotFoundError("no such model", llm_provider="scripted", model="m"), "not_found"),
    (litellm.BadRequestError("bad field", llm_provider="scripted", model="m"), "bad_request"),
    (litellm.ContextWindowExceededError("too long", llm_provider="scripted", model="m"), "context_length"),
])
def test_permanent_errors_fail_at_once(scripted, make_client, exc, kind):
    model, name = scripted([exc, "never"])
    client = make_client({"teacher": name})
    with pytest.raises(LLMError) as err:
        client.complete("teacher", USER)
    assert err.value.kind == kind and err.value.tries == 1
    assert client.slept == [] and model.remaining == 1
    [row] = read_ledger(client.run_dir).to_dict("records")
    assert row["error"].startswith(f"{kind}:") and row["tries"] == 1


def test_bounded_tries_end_in_a_recorded_failure(scripted, make_client):
    model, name = scripted([server_error()] * 10)
    client = make_client({"annotator": name}, max_tries=3)
    with pytest.raises(LLMError) as err:
        client.complete("annotator", USER)
    assert err.value.kind == "server" and err.value.tries == 3
    assert model.remaining == 7 and len(client.slept) == 2
    rows = read_ledger(client.run_dir)
    assert len(rows) == 1
    assert rows.iloc[0]["error"].startswith("server:") and rows.iloc[0]["tries"] == 3


def test_unknown_scripted_model_is_not_found(make_client):
    client = make_client({"policy": "scripted/nobody-registered-this"})
    with pytest.raises(LLMError) as err:
        client.complete("policy", USER)
    assert err.value.kind == "not_found"


def test_a_local_models_own_exception_is_not_retried(scripted, make_client):
    _, name = scripted([])  # an exhausted script: a bug in the test, not a flaky network
    client = make_client({"policy": name})
    with pytest.raises(LLMError, match="ScriptRanOut: scripted model .* ran out of replies") as err:
        client.complete("policy", USER)
    assert err.value.kind == "error" and client.slept == []
    assert "Traceback" not in str(err.value)


def test_builtin_connection_error_from_a_local_model_is_retried(scripted, make_client):
    _, name = scripted([ConnectionError("socket closed"), "ok"])
    client = make_client({"policy": name})
    assert client.complete("policy", USER)[0].text == "ok" and len(client.slept) == 1
