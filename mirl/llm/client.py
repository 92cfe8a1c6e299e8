"""The one choke point for LLM calls: every role, every stage, every model goes through here.

    client = LLMClient(config, run_dir="runs/demo", stage="profile")
    [c] = client.complete("localizer", messages)                  # text + usage
    verdict = client.complete_json("localizer", messages, schema)  # validated JSON, re-asked if needed
    policy = client.model("policy")                               # a `Model` for the agent loop

What happens on each call, in order:

1. cache: each sample index is looked up under a hash of (model, api_base, messages, sampling
   params incl. seed, index); hits are free and logged as cache_hit rows;
2. budget: before any uncached request, the run's (and the stage's) spend in the ledger is
   compared with the caps in `LLMConfig`; at or over a cap -> `BudgetExceeded`, nothing sent;
3. request: `litellm.completion` with litellm's own retries off; transient failures (rate limit,
   5xx, timeout, connection) are retried here with exponential backoff and jitter, up to
   `max_tries`; auth, unknown model, bad request and context-length errors fail at once;
4. ledger: one row per request (tokens, latency, cost, tries, error) in `<run_dir>/llm_calls.jsonl`;
   a request that fails for good is recorded and raised as `LLMError(kind=...)`;
5. samples are stored in the cache, each under its own index.

Models are litellm names (see `mirl.llm.config` for YAML examples): `hosted_vllm/...` with an
`api_base` for a vLLM or other OpenAI-compatible server, `gemini/...`, `anthropic/...`,
`openai/...`; `local/smollm2` is the embedded CPU model; `scripted/<name>` a test model.
API keys are read from the environment variable a role names and are never written anywhere.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mirl.llm import providers
from mirl.llm.cache import DiskCache, request_key, sample_key
from mirl.llm.config import LLMConfig, RoleConfig
from mirl.llm.errors import BudgetExceeded, LLMError, classify, redact, secret_values
from mirl.llm.jsonreply import JSONReplyError, parse_reply, reask_message
from mirl.llm.ledger import open_ledger
from mirl.llm.pricing import cost_usd
from mirl.llm.types import Completion, Message

# Variables providers read keys from by default; their values are redacted from anything we write.
KNOWN_KEY_ENVS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "HOSTED_VLLM_API_KEY",
                  "OPENROUTER_API_KEY", "TOGETHERAI_API_KEY", "HF_TOKEN", "HUGGINGFACE_API_KEY")
RESERVED = {"model", "messages", "n", "api_key", "api_base", "num_retries", "max_retries", "stream"}
NOT_IN_KEY = {"timeout"}


class RoleModel:
    """One role of a client, seen as a plain `Model` (what the agent loop and judges hold)."""

    def __init__(self, client: LLMClient, role: str):
        self.client = client
        self.role = role
        self.name = client.config.role(role).model

    def complete(self, messages: list[Message], n: int = 1, **kwargs: Any) -> list[Completion]:
        return self.client.complete(self.role, messages, n=n, **kwargs)

    def generator(self):
        """The role's token-level generator, or None (see `LLMClient.generator`)."""
        return self.client.generator(self.role)

    def __repr__(self) -> str:
        return f"RoleModel({self.role!r}, {self.name!r})"


class LLMClient:
    """Calls for one run directory and stage; cheap to create, safe to share between threads."""

    def __init__(self, config: LLMConfig | None = None, run_dir: str | Path = ".", stage: str = "",
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None):
        self.config = config or LLMConfig()
        self.run_dir = Path(run_dir)
        self.stage = stage
        self.ledger = open_ledger(self.run_dir)
        self.cache = DiskCache(self._cache_dir()) if self.config.cache else None
        self._sleep = sleep
        self._rng = rng or random.Random()
        providers.install()

    def _cache_dir(self) -> Path:
        d = self.config.cache_dir
        if d == "user":
            from mirl.paths import user_cache_dir

            return Path(user_cache_dir()) / "llm_cache"
        return Path(d).expanduser() if d else self.run_dir / "llm_cache"

    def model(self, role: str) -> RoleModel:
        self.config.role(role)  # fail early on an unknown role
        return RoleModel(self, role)

    def generator(self, role: str):
        """A `mirl.llm.client_generator.ClientGenerator` for the role when its model is an in-process
        engine that offers token ids (`local/...`); None otherwise (remote APIs return text)."""
        rc = self.config.role(role)
        if providers.provider_of(rc.model) != "local":
            return None
        from mirl.engines import registry
        from mirl.llm.client_generator import ClientGenerator

        engine = registry.get(rc.model.split("/", 1)[1])
        return ClientGenerator(self, role, engine) if hasattr(engine, "generate_tokens") else None

    def with_stage(self, stage: str) -> LLMClient:
        """The same settings, counting calls under another stage name."""
        return LLMClient(self.config, self.run_dir, stage, sleep=self._sleep, rng=self._rng)

    # --- public calls ------------------------------------------------------------------------

    def complete(self, role: str, messages: list[Message], n: int = 1, schema: dict[str, Any] | None = None,
                 sample_offset: int = 0, **sampling: Any) -> list[Completion]:
        """`n` samples (indices sample_offset .. sample_offset+n-1) of one prompt.

        With `schema`, each sample's JSON is validated (re-asked when invalid, see `complete_json`)
        and put in `Completion.parsed`.
        """
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        bad = RESERVED & set(sampling)
        if bad:
            raise ValueError(f"{sorted(bad)} cannot be passed as sampling parameters; set them in the role's config")
        rc = self.config.role(role)
        params = self._params(role, rc, sampling)
        timeout = float(sampling.get("timeout", rc.timeout_s))
        key_params = {k: v for k, v in params.items() if k not in NOT_IN_KEY}
        req = request_key(rc.model, messages, key_params, rc.api_base)
        indices = list(range(sample_offset, sample_offset + n))

        results: dict[int, Completion] = {}
        if self.cache is not None:
            t0 = time.perf_counter()
            for i in indices:
                hit = self.cache.get(sample_key(req, i))
                if hit is not None:
                    hit.cache_hit, hit.cost_usd, hit.sample_index, hit.parsed = True, 0.0, i, None
                    results[i] = hit
            if results:
                self.ledger.record(role=role, stage=self.stage, model=rc.model, n=len(results), cache_hit=True,
                                   latency_s=time.perf_counter() - t0, price="cache")
        missing = [i for i in indices if i not in results]
        while missing:
            batch = missing if rc.batch_n else missing[:1]
            got = self._request(role, rc, messages, params, timeout, batch)
            for i, c in zip(batch, got):
                results[i] = c
                if self.cache is not None:
                    self.cache.put(sample_key(req, i), _storable(c), meta={"role": role, "model": rc.model})
            missing = [i for i in missing if i not in results]
        out = [results[i] for i in indices]
        if schema is not None:
            out = [self._validated(role, messages, schema, c, tries=self.config.json_tries, **sampling) for c in out]
        return out

    def complete_json(self, role: str, messages: list[Message], schema: dict[str, Any], tries: int | None = None,
                      sample_index: int = 0, check: Callable[[Any], list[str]] | None = None, **sampling: Any) -> Any:
        """The reply's (last) JSON value, validated against `schema`.

        An invalid reply is re-asked with the error appended (same sample index, so reruns hit the
        cache), at most `tries` asks in all; then the failure is recorded and `LLMError(kind=
        "invalid_json")` raised. `check(value) -> [problems]` adds rules a schema cannot express.
        """
        [c] = self.complete(role, messages, n=1, sample_offset=sample_index, **sampling)
        return self._validated(role, messages, schema, c, tries=tries or self.config.json_tries, check=check,
                               **sampling).parsed

    # --- internals ---------------------------------------------------------------------------

    def _params(self, role: str, rc: RoleConfig, sampling: dict[str, Any]) -> dict[str, Any]:
        params: dict[str, Any] = {"temperature": self.config.temperature(role), "max_tokens": rc.max_tokens}
        if rc.top_p is not None:
            params["top_p"] = rc.top_p
        if rc.seed is not None:
            params["seed"] = rc.seed
        params.update(rc.extra)
        params.update(sampling)
        params.setdefault("timeout", rc.timeout_s)
        return {k: v for k, v in params.items() if v is not None}

    def _validated(self, role: str, messages: list[Message], schema: dict[str, Any], first: Completion,
                   tries: int, check: Callable[[Any], list[str]] | None = None, **sampling: Any) -> Completion:
        convo = list(messages)
        c = first
        errors = []
        for attempt in range(1, max(1, tries) + 1):
            try:
                c.parsed = parse_reply(c.text, schema, check)
                return c
            except JSONReplyError as e:
                errors.append(str(e))
                if attempt == tries:
                    break
                convo = convo + [{"role": "assistant", "content": c.text}, reask_message(str(e), schema)]
                [c] = self.complete(role, convo, n=1, sample_offset=first.sample_index, **sampling)
        rc = self.config.role(role)
        msg = f"no valid JSON after {tries} ask(s): {errors[-1]}"
        self.ledger.record(role=role, stage=self.stage, model=rc.model, n=0, tries=tries,
                           error=f"invalid_json: {self._redact(msg)}")
        raise LLMError("invalid_json", self._redact(msg), role=role, model=rc.model, tries=tries)

    def _secrets(self) -> list[str]:
        return secret_values(list(KNOWN_KEY_ENVS) + self.config.key_envs())

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets())

    def _check_budget(self, role: str, model: str) -> None:
        caps = []
        if self.config.budget_usd is not None:
            caps.append(("run", self.ledger.spent(), self.config.budget_usd))
        if self.stage in self.config.stage_budget_usd:
            caps.append((f"stage {self.stage!r}", self.ledger.spent(self.stage), self.config.stage_budget_usd[self.stage]))
        for scope, spent, cap in caps:
            if spent >= cap:
                msg = f"{scope} spent ${spent:.4f} of its ${cap:.4f} budget"
                self.ledger.record(role=role, stage=self.stage, model=model, n=0, tries=0, error=f"budget: {msg}")
                raise BudgetExceeded(msg, role=role, model=model, spent_usd=spent, cap_usd=cap)

    def _request(self, role: str, rc: RoleConfig, messages: list[Message], params: dict[str, Any], timeout: float,
                 indices: list[int]) -> list[Completion]:
        """One request for len(indices) samples (retried on transient errors); may return fewer."""
        litellm = providers.import_litellm()
        if providers.is_in_process(rc.model):
            providers.install()  # cheap when already there; restores it if another library reset the map
        self._check_budget(role, rc.model)
        kwargs: dict[str, Any] = {k: v for k, v in params.items() if k != "timeout"}
        if len(indices) > 1:
            kwargs["n"] = len(indices)
        kwargs.update(providers.extra_params(rc.model, indices))
        if rc.api_base:
            kwargs["api_base"] = rc.api_base
        if rc.api_key_env:
            key = os.environ.get(rc.api_key_env)
            if not key:
                msg = f"environment variable {rc.api_key_env} (api_key_env of role {role}) is not set"
                self.ledger.record(role=role, stage=self.stage, model=rc.model, n=len(indices), tries=0,
                                   error=f"auth: {msg}")
                raise LLMError("auth", msg, role=role, model=rc.model)
            kwargs["api_key"] = key
        max_tries = max(1, self.config.max_tries)
        for attempt in range(1, max_tries + 1):
            t0 = time.perf_counter()
            try:
                resp = litellm.completion(model=rc.model, messages=messages, timeout=timeout, num_retries=0, **kwargs)
            except Exception as e:  # noqa: BLE001 - classified below, re-raised as LLMError
                latency = time.perf_counter() - t0
                cause = _in_process_cause(e) if providers.is_in_process(rc.model) else None
                if cause is not None:  # litellm wraps a local model's own exceptions as connection errors
                    e = cause
                kind = classify(e)
                if kind in ("rate_limit", "server", "timeout", "connection") and attempt < max_tries:
                    self._sleep(self._backoff(attempt))
                    continue
                msg = self._redact(f"{type(e).__name__}: {e}")[:2000]
                self.ledger.record(role=role, stage=self.stage, model=rc.model, n=len(indices), tries=attempt,
                                   latency_s=latency, error=f"{kind}: {msg}")
                raise LLMError(kind, msg, role=role, model=rc.model, tries=attempt) from None
            latency = time.perf_counter() - t0
            return self._completions(role, rc, resp, latency, attempt, indices)
        raise AssertionError("unreachable")

    def _backoff(self, attempt: int) -> float:
        wait = min(self.config.backoff_max_s, self.config.backoff_s * 2 ** (attempt - 1))
        return wait * (1.0 + self.config.jitter * self._rng.random())

    def _completions(self, role: str, rc: RoleConfig, resp: Any, latency: float, tries: int,
                     indices: list[int]) -> list[Completion]:
        usage = getattr(resp, "usage", None)
        n_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        n_out = int(getattr(usage, "completion_tokens", 0) or 0)
        n_cached = _cached_tokens(usage)
        cost, price = cost_usd(rc.model, n_in, n_cached, n_out, self.config.prices,
                               self.config.currency_rates)
        choices = list(getattr(resp, "choices", []) or [])[: len(indices)]
        self.ledger.record(role=role, stage=self.stage, model=rc.model, n=len(choices), input_tokens=n_in,
                           cached_input_tokens=n_cached, output_tokens=n_out, latency_s=latency, cost_usd=cost,
                           price=price, tries=tries, error=None if choices else "error: reply had no choices")
        if not choices:
            raise LLMError("error", "the reply had no choices", role=role, model=rc.model, tries=tries)
        texts = [(ch.message.content or "") if getattr(ch, "message", None) else "" for ch in choices]
        exact = [_choice_tokens(ch) for ch in choices]
        shares = exact if None not in exact else _split(n_out, [len(t) + 1 for t in texts])
        out = []
        for i, (ch, text, share) in enumerate(zip(choices, texts, shares)):
            calls = getattr(ch.message, "tool_calls", None) or []
            out.append(Completion(
                text=text, model=rc.model, input_tokens=n_in, cached_input_tokens=n_cached, output_tokens=share,
                cost_usd=cost / len(choices), latency_s=latency, cache_hit=False,
                finish_reason=str(getattr(ch, "finish_reason", "") or ""),
                tool_calls=[_as_dict(t) for t in calls], sample_index=indices[i]))
        return out


def _in_process_cause(exc: BaseException) -> BaseException | None:
    """The exception an in-process model itself raised, under litellm's generic wrapping (None if none)."""
    litellm = providers.import_litellm()
    if type(exc) is not litellm.APIConnectionError:  # litellm's catch-all for exceptions it does not know
        return None
    e: BaseException | None = exc
    for _ in range(12):
        if e is None:
            return None
        if type(e).__module__.split(".")[0] not in ("litellm", "openai", "httpx", "httpcore"):
            return e
        e = e.__cause__ if e.__cause__ is not None else (None if e.__suppress_context__ else e.__context__)
    return None


def _storable(c: Completion) -> Completion:
    from dataclasses import replace

    return replace(c, parsed=None, cache_hit=False)


def _cached_tokens(usage: Any) -> int:
    if usage is None:
        return 0
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    if cached is None:
        cached = getattr(usage, "cache_read_input_tokens", None)
    try:
        return int(cached or 0)
    except (TypeError, ValueError):
        return 0


def _choice_tokens(choice: Any) -> int | None:
    """Per-sample output tokens, when the provider reports them (the in-process ones do)."""
    fields = getattr(getattr(choice, "message", None), "provider_specific_fields", None) or {}
    value = fields.get(providers.OUTPUT_TOKENS_KEY) if isinstance(fields, dict) else None
    return int(value) if isinstance(value, int) else None


def _split(total: int, weights: list[int]) -> list[int]:
    """Share `total` out by weight in whole numbers that add up to `total`."""
    if not weights:
        return []
    s = sum(weights) or len(weights)
    shares = [total * w // s for w in weights]
    for i in range(total - sum(shares)):
        shares[i % len(shares)] += 1
    return shares


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    for attr in ("model_dump", "dict", "to_dict"):
        if hasattr(obj, attr):
            try:
                return getattr(obj, attr)()
            except Exception:  # noqa: BLE001 - fall through to the next way of dumping it
                continue
    return {"value": str(obj)}
