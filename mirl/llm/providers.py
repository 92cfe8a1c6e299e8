"""In-process models served through litellm, so they share the one call path.

Two custom providers are registered in `litellm.custom_provider_map`:

- `scripted/<name>`: a `ScriptedModel` registered with `mirl.llm.scripted.register` (tests, dry runs);
- `local/<name>`: an in-process engine (`local/smollm2`, the embedded model, or a checkpoint directory;
  see `mirl.engines.registry`).

`import_litellm()` is the only way this package imports litellm: it pins litellm to its bundled
price map first, because litellm otherwise tries to download one at import (and waits for the
network, which CI machines do not have).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

_HANDLERS: tuple = ()
_LOCK = threading.Lock()

# Extra keyword the client passes to in-process providers only: which sample indices to produce.
SAMPLE_INDICES_KEY = "mirl_sample_indices"
OUTPUT_TOKENS_KEY = "mirl_output_tokens"
IN_PROCESS_PROVIDERS = ("scripted", "local")


def import_litellm():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    return litellm


def _response(litellm, model_response, model: str, choices: list[tuple], prompt_tokens: int,
              completion_tokens: int, cached_tokens: int = 0):
    """choices: (text, finish_reason, output_tokens[, tool_calls]) per sample; cached_tokens: prompt
    tokens an in-process model took from its prefix cache (reported like a hosted API's)."""
    # per-sample token counts ride along in provider_specific_fields (the usage block only has the sum)
    model_response.choices = [
        litellm.Choices(index=i, finish_reason=ch[1], message=litellm.Message(
            content=ch[0], role="assistant", tool_calls=(ch[3] if len(ch) > 3 and ch[3] else None),
            provider_specific_fields={OUTPUT_TOKENS_KEY: ch[2]}))
        for i, ch in enumerate(choices)
    ]
    model_response.model = model
    model_response.created = int(time.time())
    details = {"prompt_tokens_details": {"cached_tokens": cached_tokens}} if cached_tokens else {}
    model_response.usage = litellm.Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                         total_tokens=prompt_tokens + completion_tokens, **details)
    return model_response


def _make_handlers():
    litellm = import_litellm()
    from litellm import CustomLLM

    class ScriptedProvider(CustomLLM):
        def completion(self, model, messages, api_base, custom_prompt_dict, model_response, print_verbose,
                       encoding, api_key, logging_obj, optional_params, *args, **kwargs):
            from mirl.llm import scripted

            try:
                sm = scripted.lookup(model)
            except LookupError as e:
                raise litellm.NotFoundError(str(e), model=f"scripted/{model}", llm_provider="scripted") from None
            n = int(optional_params.get("n") or 1)
            outs = sm.complete(messages, n=n)
            return _response(litellm, model_response, f"scripted/{model}",
                             [(c.text, c.finish_reason, c.output_tokens, c.tool_calls) for c in outs],
                             outs[0].input_tokens if outs else 0, sum(c.output_tokens for c in outs))

    class LocalProvider(CustomLLM):
        def completion(self, model, messages, api_base, custom_prompt_dict, model_response, print_verbose,
                       encoding, api_key, logging_obj, optional_params, *args, **kwargs):
            from mirl.engines import registry
            from mirl.engines.generator import ContextLengthError

            try:
                lm = registry.get(model)
            except LookupError as e:
                raise litellm.NotFoundError(str(e), model=f"local/{model}", llm_provider="local") from None
            n = int(optional_params.get("n") or 1)
            indices = optional_params.get(SAMPLE_INDICES_KEY) or list(range(n))
            try:
                gen = lm.generate(
                    messages,
                    sample_indices=list(indices)[:n] if len(indices) >= n else list(range(n)),
                    max_tokens=int(optional_params.get("max_tokens") or 256),
                    temperature=float(optional_params.get("temperature", 1.0) if optional_params.get("temperature")
                                      is not None else 1.0),
                    top_p=float(optional_params.get("top_p") or 1.0),
                    seed=int(optional_params.get("seed") or 0),
                    stop=optional_params.get("stop"),
                )
            except ContextLengthError as e:  # what a hosted API answers, so the client's kind is the same
                raise litellm.ContextWindowExceededError(str(e), model=f"local/{model}", llm_provider="local") from None
            return _response(litellm, model_response, f"local/{model}",
                             [(s.text, s.finish_reason, s.output_tokens) for s in gen.samples],
                             gen.prompt_tokens, sum(s.output_tokens for s in gen.samples),
                             int(getattr(gen, "cached_tokens", 0) or 0))

    return ScriptedProvider(), LocalProvider()


def install() -> None:
    """Register the in-process providers with litellm (idempotent, thread-safe; re-registers them
    if something else replaced `litellm.custom_provider_map`)."""
    global _HANDLERS
    with _LOCK:
        litellm = import_litellm()
        current = list(litellm.custom_provider_map or [])
        if _HANDLERS and all(any(p.get("custom_handler") is h for p in current) for h in _HANDLERS):
            return
        _HANDLERS = _make_handlers()
        scripted_h, local_h = _HANDLERS
        others = [p for p in current if p.get("provider") not in IN_PROCESS_PROVIDERS]
        litellm.custom_provider_map = others + [
            {"provider": "scripted", "custom_handler": scripted_h},
            {"provider": "local", "custom_handler": local_h},
        ]
        from litellm.utils import custom_llm_setup

        custom_llm_setup()


def provider_of(model: str) -> str:
    return model.split("/", 1)[0] if "/" in model else ""


def is_in_process(model: str) -> bool:
    return provider_of(model) in IN_PROCESS_PROVIDERS


def extra_params(model: str, sample_indices: list[int]) -> dict[str, Any]:
    """Keyword arguments that only in-process providers understand (never sent to a remote API)."""
    return {SAMPLE_INDICES_KEY: sample_indices} if is_in_process(model) else {}
