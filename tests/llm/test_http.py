"""The client over real HTTP: a local OpenAI-compatible server answering errors, cached tokens, prices.

Each failure kind is what a provider really sends (status and error body through litellm and the
openai SDK), so retries, classification and the ledger are tested on the path hosted models use.
"""

from __future__ import annotations

import uuid

import litellm
import pytest

from mirl.llm.errors import LLMError
from mirl.llm.ledger import read_ledger
from tests.fakes.openai_server import Fail, Usage, refused_url, scripted, serve

from .conftest import USER

KEY_ENV = "MIRL_TEST_HTTP_KEY"


@pytest.fixture
def server():
    """start(replies) -> (base URL, list of request bodies the server received)."""
    started = []

    def start(replies):
        srv, url = serve(reply=scripted(replies))
        started.append(srv)
        return url, srv.RequestHandlerClass.requests

    yield start
    for srv in started:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def http_client(make_client, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-http-test-0000000000")

    def make(url, model="openai/test-model", **fields):
        client = make_client({"localizer": model}, jitter=0.0, **fields)
        client.config.localizer.api_base = url
        client.config.localizer.api_key_env = KEY_ENV
        return client

    return make


@pytest.mark.parametrize("status,kind", [(429, "rate_limit"), (500, "server"), (503, "server")])
def test_transient_status_is_retried_then_succeeds(server, http_client, status, kind):
    url, requests = server([Fail(status), Fail(status), "ok after two failures"])
    client = http_client(url, max_tries=3)
    [c] = client.complete("localizer", USER)
    assert c.text == "ok after two failures"
    assert len(requests) == 3 and client.slept == pytest.approx([0.01, 0.02])
    [row] = read_ledger(client.run_dir).to_dict("records")
    assert row["tries"] == 3 and row["error"] is None and row["n"] == 1


@pytest.mark.parametrize("status,kind", [(429, "rate_limit"), (500, "server"), (503, "server")])
def test_transient_status_gives_up_after_max_tries(server, http_client, status, kind):
    url, requests = server([Fail(status, "still failing")])
    client = http_client(url, max_tries=3)
    with pytest.raises(LLMError) as err:
        client.complete("localizer", USER)
    assert err.value.kind == kind and err.value.tries == 3
    assert len(requests) == 3 and len(client.slept) == 2  # each try is one request: no retries underneath
    [row] = read_ledger(client.run_dir).to_dict("records")
    assert row["error"].startswith(f"{kind}: ") and row["tries"] == 3 and "still failing" in row["error"]


@pytest.mark.parametrize("status,kind", [(401, "auth"), (404, "not_found"), (400, "bad_request")])
def test_permanent_status_fails_at_once(server, http_client, status, kind):
    url, requests = server([Fail(status, "no use retrying"), "never sent"])
    client = http_client(url, max_tries=4)
    with pytest.raises(LLMError) as err:
        client.complete("localizer", USER)
    assert err.value.kind == kind and err.value.tries == 1
    assert len(requests) == 1 and client.slept == []
    [row] = read_ledger(client.run_dir).to_dict("records")
    assert row["error"].startswith(f"{kind}: ") and row["tries"] == 1


def test_refused_connection_is_a_retried_connection_error(http_client):
    client = http_client(refused_url(), max_tries=3)
    with pytest.raises(LLMError) as err:
        client.complete("localizer", USER)
    assert err.value.kind == "connection" and err.value.tries == 3 and len(client.slept) == 2
    [row] = read_ledger(client.run_dir).to_dict("records")
    assert row["error"].startswith("connection: ") and row["tries"] == 3


PRICE = {"input": 3.0, "cached_input": 0.3, "output": 15.0}  # USD per million tokens
USAGE = Usage(prompt=1000, completion=200, cached=600)


def test_cached_input_tokens_are_priced_at_the_cached_rate(server, http_client):
    url, _ = server([("a reply", USAGE)])
    client = http_client(url, prices={"openai/test-model": PRICE})
    [c] = client.complete("localizer", USER)
    expected = (400 * 3.0 + 600 * 0.3 + 200 * 15.0) / 1e6  # 400 uncached + 600 cached input, 200 output
    assert c.cost_usd == pytest.approx(expected) and c.cached_input_tokens == 600
    [row] = read_ledger(client.run_dir).to_dict("records")
    assert (row["input_tokens"], row["cached_input_tokens"], row["output_tokens"]) == (1000, 600, 200)
    assert row["cost_usd"] == pytest.approx(expected) and row["price"] == "table"
    assert client.ledger.spent("test") == pytest.approx(expected)


def test_cached_input_without_a_cached_rate_is_priced_as_input(server, http_client):
    url, _ = server([("a reply", USAGE)])
    client = http_client(url, prices={"openai/test-model": {"input": 3.0, "output": 15.0}})
    client.complete("localizer", USER)
    [row] = read_ledger(client.run_dir).to_dict("records")
    assert row["cost_usd"] == pytest.approx((1000 * 3.0 + 200 * 15.0) / 1e6)


@pytest.mark.parametrize("cached_rate", [0.5e-6, None])
def test_litellm_registered_prices_with_and_without_a_cached_rate(server, http_client, cached_rate):
    model = f"openai/mirl-test-{uuid.uuid4().hex[:8]}"
    entry = {"input_cost_per_token": 2e-6, "output_cost_per_token": 8e-6, "litellm_provider": "openai", "mode": "chat"}
    if cached_rate is not None:
        entry["cache_read_input_token_cost"] = cached_rate
    litellm.register_model({model: entry})
    url, _ = server([("a reply", USAGE)])
    client = http_client(url, model=model)
    client.complete("localizer", USER)
    [row] = read_ledger(client.run_dir).to_dict("records")
    cached_cost = 600 * cached_rate if cached_rate is not None else 600 * 2e-6  # no cached rate: input rate
    assert row["price"] == "litellm" and row["cached_input_tokens"] == 600
    assert row["cost_usd"] == pytest.approx(400 * 2e-6 + cached_cost + 200 * 8e-6)


def test_a_price_in_another_currency_is_converted_with_the_params_rate(server, http_client):
    url, _ = server([("a reply", USAGE)])
    cny = {"input": 3.646, "cached_input": 0.729, "output": 21.875, "currency": "CNY"}
    client = http_client(url, prices={"openai/test-model": cny}, currency_rates={"CNY": 0.125})
    client.complete("localizer", USER)
    [row] = read_ledger(client.run_dir).to_dict("records")
    # 400 uncached + 600 cached input, 200 output, CNY per million; 0.125 USD per CNY
    assert row["cost_usd"] == pytest.approx((400 * 3.646 + 600 * 0.729 + 200 * 21.875) * 0.125 / 1e6)
