"""Cost of one request in USD: the config's price table first, then litellm's bundled price map.

A model found in neither (typically a self-hosted one) costs 0 and is marked `price=none` in the
ledger, so a cost report can say which numbers are real. Table prices are per million tokens, in
USD unless the entry names another `currency` (converted with `rates`: USD per unit of that
currency, `models.currency_rates`); cached input tokens are billed at `cached_input` (default:
the `input` price).
"""

from __future__ import annotations

from typing import Any

PER_MILLION = 1_000_000
PRICE_FIELDS = ("input", "cached_input", "output")
USD = "USD"


def usd_price(model: str, table: dict[str, Any], rates: dict[str, float] | None = None) -> dict[str, float]:
    """One price entry as USD per million tokens: {input, cached_input, output}."""
    unknown = set(table) - {*PRICE_FIELDS, "currency"}
    if unknown:
        raise ValueError(f"prices[{model!r}]: unknown field(s) {sorted(unknown)}; "
                         f"use input, cached_input, output, currency")
    currency = str(table.get("currency") or USD).upper()
    rate = currency_rate(currency, rates, where=f"prices[{model!r}]")
    p_in = float(table.get("input", 0.0))
    return {"input": p_in * rate, "cached_input": float(table.get("cached_input", p_in)) * rate,
            "output": float(table.get("output", 0.0)) * rate}


def currency_rate(currency: str, rates: dict[str, float] | None = None, where: str = "price") -> float:
    """USD per unit of `currency` (1 for USD); a currency without a rate is an error naming it."""
    currency = currency.upper()
    table = {k.upper(): float(v) for k, v in (rates or {}).items()}
    if currency == USD:
        return table.get(USD, 1.0)
    if currency not in table:
        raise ValueError(f"{where}: currency {currency} has no rate; add it to models.currency_rates "
                         f"(USD per {currency}), e.g. {{{currency}: 0.14}}")
    return table[currency]


def cost_usd(model: str, input_tokens: int, cached_input_tokens: int, output_tokens: int,
             prices: dict[str, dict[str, Any]] | None = None,
             rates: dict[str, float] | None = None) -> tuple[float, str]:
    """(cost, source) with source one of `table`, `litellm`, `none`."""
    table = (prices or {}).get(model)
    uncached = max(0, input_tokens - cached_input_tokens)
    if table is not None:
        p = usd_price(model, table, rates)
        cost = uncached * p["input"] + cached_input_tokens * p["cached_input"] + output_tokens * p["output"]
        return cost / PER_MILLION, "table"
    from mirl.llm.providers import import_litellm, is_in_process

    if is_in_process(model):
        return 0.0, "none"
    litellm = import_litellm()
    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model, prompt_tokens=input_tokens, completion_tokens=output_tokens,
            cache_read_input_tokens=cached_input_tokens)
    except Exception:  # litellm raises for models missing from its map
        return 0.0, "none"
    total = float(prompt_cost) + float(completion_cost)
    return total, ("litellm" if total > 0 or input_tokens + output_tokens == 0 else "none")


def register_prices(prices: dict[str, dict[str, Any]], rates: dict[str, float] | None = None) -> list[str]:
    """Register a price table with litellm (for code that asks litellm for a cost), in USD per token.

    The cached-input price is always registered (`cache_read_input_token_cost`, the input price when
    the entry has none): left out, litellm would not price cached input tokens as the table does."""
    from mirl.llm.providers import import_litellm

    litellm = import_litellm()
    entries = {}
    for model, table in prices.items():
        p = usd_price(model, table, rates)
        provider = model.split("/", 1)[0] if "/" in model else "openai"
        entries[model] = {"input_cost_per_token": p["input"] / PER_MILLION,
                          "cache_read_input_token_cost": p["cached_input"] / PER_MILLION,
                          "output_cost_per_token": p["output"] / PER_MILLION,
                          "litellm_provider": provider, "mode": "chat"}
    if entries:
        litellm.register_model(entries)
    return sorted(entries)
