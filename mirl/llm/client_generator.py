"""A role's token-level generator seen through the client: counted in the ledger like text calls.

The engines themselves (`mirl.engines`) know nothing of roles, budgets or prices; this wrapper is
where a token-path call meets the choke point: the role's sampling defaults, the budget check
before the call and one ledger row after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mirl.engines.generator import Generator, TokenGeneration
from mirl.llm.errors import LLMError, classify
from mirl.llm.pricing import cost_usd

SAMPLING_KEYS = ("max_tokens", "temperature", "top_p", "seed", "stop_ids")


class ClientGenerator:
    """A role's generator seen through an `LLMClient`: the role's sampling defaults, the budget
    check and one ledger row per request (role, stage, prompt/cached/sampled tokens, latency,
    cost), exactly as text calls are counted. No response cache: samples are for training."""

    def __init__(self, client: Any, role: str, engine: Generator):
        self.client, self.role, self.engine = client, role, engine
        self.model = client.config.role(role).model
        self.name = self.model
        self.tokenizer = engine.tokenizer
        self.end_ids = engine.end_ids

    def sampling(self, **overrides: Any) -> dict[str, Any]:
        """The role's defaults (temperature, max_tokens, top_p, seed) under `overrides`."""
        unknown = set(overrides) - set(SAMPLING_KEYS)
        if unknown:
            raise ValueError(f"the token path takes only {', '.join(SAMPLING_KEYS)}; got {sorted(unknown)}")
        rc = self.client.config.role(self.role)
        params = {"temperature": self.client.config.temperature(self.role), "max_tokens": rc.max_tokens,
                  "top_p": rc.top_p, "seed": rc.seed}
        params.update({k: v for k, v in overrides.items() if v is not None})
        return {k: v for k, v in params.items() if v is not None}

    def generate_tokens(self, prompt_ids: Sequence[int], sample_indices: Sequence[int] = (0,),
                        **sampling: Any) -> TokenGeneration:
        import time

        client, role, model = self.client, self.role, self.model
        params = self.sampling(**sampling)
        client._check_budget(role, model)
        t0 = time.perf_counter()
        try:
            gen = self.engine.generate_tokens(prompt_ids, list(sample_indices), **params)
        except Exception as e:  # noqa: BLE001 - recorded, then raised as LLMError like a text call
            kind = classify(e)
            msg = client._redact(f"{type(e).__name__}: {e}")[:2000]
            client.ledger.record(role=role, stage=client.stage, model=model, n=len(sample_indices), tries=1,
                                 latency_s=time.perf_counter() - t0, error=f"{kind}: {msg}")
            raise LLMError(kind, msg, role=role, model=model, tries=1) from e
        latency = time.perf_counter() - t0
        n_out = sum(len(s.ids) for s in gen.samples)
        cost, price = cost_usd(model, gen.prompt_tokens, gen.cached_tokens, n_out, client.config.prices,
                               client.config.currency_rates)
        client.ledger.record(role=role, stage=client.stage, model=model, n=len(gen.samples),
                             input_tokens=gen.prompt_tokens, cached_input_tokens=gen.cached_tokens,
                             output_tokens=n_out, latency_s=latency, cost_usd=cost, price=price, tries=1)
        gen.meta["cost_usd"] = cost
        return gen

    def update_weights(self, weights: Any) -> None:
        self.engine.update_weights(weights)

    def __repr__(self) -> str:
        return f"ClientGenerator({self.role!r}, {self.model!r})"
