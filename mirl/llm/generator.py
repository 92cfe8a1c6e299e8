"""The Generator seam: token ids in, sampled token ids and the sampler's log-probabilities out.

RL trains on exactly the tokens the sampler produced and saw, so below the text `Model` there is a
token-level seam. A generator takes a prompt as token ids and returns, for each requested sample,

- `ids`: the sampled token ids, in order, including the end token when one was sampled;
- `logprobs`: one float per sampled id: the log-probability of that token under the distribution
  it was drawn from at the sampling temperature T, i.e. `log_softmax(logits / T)[id]`, computed in
  float32 from the logits the sampler used, BEFORE top-p truncation (the truncated, renormalized
  distribution is not what a learner recomputes). Greedy decoding (T <= 0) stores T = 1, i.e.
  `log_softmax(logits)[id]`. A learner's teacher-forced pass over the same ids computes the same
  numbers (up to float rounding between batch shapes and kernels);
- `finish_reason`: "stop" (an end token was sampled) or "length" (max_tokens reached).

`update_weights(weights)` loads new weights and drops every KV or prefix cache built with the old
ones, so no later sample is computed from stale state.

Implementations: `mirl.llm.embedded.EmbeddedLM` (the batched CPU engine), its GPU subclass
`mirl.llm.vllm_engine.TransformersEngine`, and `mirl.llm.vllm_engine.VLLMEngine`. Through the
client, `LLMClient.generator(role)` wraps one with the ledger (`ClientGenerator`), so token-path
calls are counted like text calls. The agent harness builds the prompts (see `mirl.agent.tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class TokenSample:
    """One sample: ids and logprobs have the same length (see the module docstring for which logprob)."""

    ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length"


@dataclass
class TokenGeneration:
    """The samples of one prompt, with what the prompt cost."""

    samples: list[TokenSample]
    prompt_tokens: int  # tokens in the prompt
    cached_tokens: int = 0  # of those, how many came from a prefix cache instead of being prefilled
    seconds: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Generator(Protocol):
    """A token-level policy: what RL needs from a sampler.

    `tokenizer` is a Hugging Face tokenizer (chat template, encode, decode): the harness uses it
    once per episode for the first prompt and for observations, never to re-render a chat."""

    name: str
    tokenizer: Any
    end_ids: set[int]

    def generate_tokens(self, prompt_ids: Sequence[int], sample_indices: Sequence[int], max_tokens: int = 256,
                        temperature: float = 1.0, top_p: float = 1.0, seed: int = 0) -> TokenGeneration: ...

    def update_weights(self, weights: Any) -> None: ...


def check_prompt(prompt_ids: Sequence[int], vocab_size: int | None = None) -> list[int]:
    """The prompt as a list of ints, or a ValueError saying what is wrong with it."""
    ids = [int(t) for t in prompt_ids]
    if not ids:
        raise ValueError("the prompt has no token ids")
    if vocab_size is not None:
        bad = [t for t in ids if t < 0 or t >= vocab_size]
        if bad:
            raise ValueError(f"prompt token ids outside the vocabulary of {vocab_size}: {bad[:5]}")
    return ids


SAMPLING_KEYS = ("max_tokens", "temperature", "top_p", "seed")


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

        from mirl.llm.errors import LLMError, classify
        from mirl.llm.pricing import cost_usd

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


def teacher_forced_logprobs(model: Any, prompt_ids: Sequence[int], completion_ids: Sequence[int],
                            temperature: float = 1.0) -> list[float]:
    """The logprob of each completion id given everything before it, from ONE forward pass of
    `model` (a transformers causal LM) over prompt + completion: `log_softmax(logits / T)` in
    float32, T = 1 for greedy, as the sampler stores it. What a learner computes as pi."""
    import torch

    prompt, comp = [int(t) for t in prompt_ids], [int(t) for t in completion_ids]
    if not comp:
        return []
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + comp], dtype=torch.long, device=device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:len(prompt) + len(comp) - 1].float()
    scaled = logits / temperature if temperature > 0 else logits
    target = torch.tensor(comp, dtype=torch.long, device=device).view(-1, 1)
    return (scaled.gather(-1, target).squeeze(-1) - torch.logsumexp(scaled, dim=-1)).tolist()
