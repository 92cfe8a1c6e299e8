"""Price tables: currencies, the cached-input price, params errors, registration with litellm."""

from __future__ import annotations

import uuid

import pytest

from mirl.llm.pricing import cost_usd, register_prices, usd_price
from mirl.llm.providers import import_litellm
from mirl.params import make
from mirl.typed import ParamsError

CNY = {"input": 3.646, "cached_input": 0.729, "output": 21.875, "currency": "CNY"}
RATES = {"CNY": 1 / 7.2917}


def test_a_cny_price_is_converted_to_usd_per_million():
    p = usd_price("q", CNY, RATES)
    assert p == pytest.approx({"input": 3.646 / 7.2917, "cached_input": 0.729 / 7.2917, "output": 21.875 / 7.2917})
    cost, source = cost_usd("q", 2_000_000, 500_000, 100_000, {"q": CNY}, RATES)
    # 1.5M uncached, 0.5M cached input, 0.1M output
    assert source == "table"
    assert cost == pytest.approx((1.5 * 3.646 + 0.5 * 0.729 + 0.1 * 21.875) / 7.2917)


def test_usd_is_the_default_currency_and_cached_defaults_to_input():
    cost, _ = cost_usd("m", 1_000_000, 400_000, 0, {"m": {"input": 2.0, "output": 8.0}})
    assert cost == pytest.approx(2.0)  # cached input billed at the input price


def test_a_currency_without_a_rate_is_an_error_naming_it_and_the_model():
    with pytest.raises(ValueError, match=r"prices\['q'\]: currency CNY has no rate.*currency_rates"):
        cost_usd("q", 10, 0, 10, {"q": CNY})


def test_params_refuse_an_unconvertible_or_unknown_price_field():
    with pytest.raises(ParamsError, match=r"models\.prices\['q'\]: currency CNY has no rate"):
        make(models={"prices": {"q": CNY}})
    with pytest.raises(ParamsError, match=r"unknown field\(s\) \['cache'\]"):
        make(models={"prices": {"q": {"input": 1.0, "cache": 0.1}}})
    params = make(models={"prices": {"q": CNY}, "currency_rates": RATES})
    assert params.models.currency_rates == RATES


@pytest.mark.parametrize("table,rates", [({"input": 2.0, "cached_input": 0.2, "output": 8.0}, None),
                                         (CNY, RATES)])
def test_registered_prices_give_litellm_the_table_cost_cached_tokens_included(table, rates):
    litellm = import_litellm()
    model = f"openai/mirl-price-{uuid.uuid4().hex[:8]}"
    assert register_prices({model: table}, rates) == [model]
    prompt, completion = litellm.cost_per_token(model=model, prompt_tokens=1000, completion_tokens=200,
                                                cache_read_input_tokens=600)
    expected, _ = cost_usd(model, 1000, 600, 200, {model: table}, rates)
    p = usd_price(model, table, rates)
    assert expected == pytest.approx((400 * p["input"] + 600 * p["cached_input"] + 200 * p["output"]) / 1e6)
    assert prompt + completion == pytest.approx(expected)
