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

A request may name its own `stop_ids` (default: the engine's `end_ids`) and `max_tokens`; a prompt
that does not leave room for `max_tokens` in the model's context is a `ContextLengthError` naming
both lengths.

Implementations: `mirl.engines.embedded.EmbeddedLM` (the batched CPU engine),
`mirl.engines.paged.PagedEngine` (continuous batching on a GPU, eagerly on a CPU for tests) and
`mirl.engines.vllm_engine.VLLMEngine`. Through the client, `LLMClient.generator(role)` wraps one with
the ledger (`mirl.llm.client_generator.ClientGenerator`), so token-path calls are counted like text
calls. The agent harness builds the prompts (see `mirl.agent.tokens`).
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


@dataclass
class Sample:
    """One sample of a text call (`generate(messages, ...)`, the path of the litellm provider)."""

    text: str
    output_tokens: int
    finish_reason: str  # "stop" (end token or stop string) or "length"


@dataclass
class Generation:
    samples: list[Sample]
    prompt_tokens: int
    seconds: float
    cached_tokens: int = 0  # prompt tokens taken from the prefix cache


@runtime_checkable
class Generator(Protocol):
    """A token-level policy: what RL needs from a sampler.

    `tokenizer` is a Hugging Face tokenizer (chat template, encode, decode): the harness uses it
    once per episode for the first prompt and for observations, never to re-render a chat."""

    name: str
    tokenizer: Any
    end_ids: set[int]

    def generate_tokens(self, prompt_ids: Sequence[int], sample_indices: Sequence[int], max_tokens: int = 256,
                        temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
                        stop_ids: Sequence[int] | None = None) -> TokenGeneration: ...

    def update_weights(self, weights: Any) -> None: ...


class ContextLengthError(ValueError):
    """The prompt and the tokens asked for do not fit the model's context."""

    def __init__(self, prompt_tokens: int, max_tokens: int, context: int, model: str = ""):
        self.prompt_tokens, self.max_tokens, self.context = prompt_tokens, max_tokens, context
        where = f" of {model}" if model else ""
        super().__init__(f"prompt of {prompt_tokens} tokens + max_tokens {max_tokens} exceeds the context{where} "
                         f"of {context} tokens")


def check_context(n_prompt: int, max_tokens: int, context: int, model: str = "") -> None:
    if n_prompt + max(0, int(max_tokens)) > context:
        raise ContextLengthError(n_prompt, int(max_tokens), context, model)


def row_seed(seed: int, index: int) -> int:
    """The seed of sample `index` under `seed` (63 bits), decorrelated across both: a sample's
    random draws depend on this alone, never on what else shares its batch."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{seed}:{index}".encode()).digest()[:8], "little") & ((1 << 63) - 1)


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
