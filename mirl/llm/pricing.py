"""Cost of one request in USD: the config's price table first, then litellm's bundled price map.

A model found in neither (typically a self-hosted one) costs 0 and is marked `price=none` in the
ledger, so a cost report can say which numbers are real. Table prices are USD per million tokens;
cached input tokens are billed at `cached_input` (default: the `input` price).
"""

from __future__ import annotations

PER_MILLION = 1_000_000


def cost_usd(model: str, input_tokens: int, cached_input_tokens: int, output_tokens: int,
             prices: dict[str, dict[str, float]] | None = None) -> tuple[float, str]:
    """(cost, source) with source one of `table`, `litellm`, `none`."""
    table = (prices or {}).get(model)
    uncached = max(0, input_tokens - cached_input_tokens)
    if table is not None:
        unknown = set(table) - {"input", "cached_input", "output"}
        if unknown:
            raise ValueError(f"prices[{model!r}]: unknown field(s) {sorted(unknown)}; use input, cached_input, output")
        p_in = float(table.get("input", 0.0))
        p_cached = float(table.get("cached_input", p_in))
        p_out = float(table.get("output", 0.0))
        return (uncached * p_in + cached_input_tokens * p_cached + output_tokens * p_out) / PER_MILLION, "table"
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
