"""Which model serves each role, how it samples, and what the calls may cost.

`LLMConfig` is loadable with `mirl.typed.build` / `load_params` (for example from the `llm:`
section of a params YAML). Every role has a `RoleConfig`; a role left out keeps its default
(the embedded `local/smollm2`, which runs anywhere without keys or network).

Pointing roles at real models in params YAML::

    llm:
      policy:                       # a vLLM (or any OpenAI-compatible) server
        model: hosted_vllm/Qwen/Qwen3-8B
        api_base: http://gpu-node:8000/v1
      localizer:                    # Gemini; the key is read from $GEMINI_API_KEY at call time
        model: gemini/gemini-2.5-flash
        api_key_env: GEMINI_API_KEY
      teacher:                      # Anthropic; no `n` in its API, so one request per sample
        model: anthropic/claude-sonnet-4-20250514
        api_key_env: ANTHROPIC_API_KEY
        batch_n: false
      prices:                       # per million tokens, for models litellm has no price for
        hosted_vllm/Qwen/Qwen3-8B: {input: 0.0, cached_input: 0.0, output: 0.0}
        dashscope/qwen-plus: {input: 3.646, cached_input: 0.729, output: 21.875, currency: CNY}
      currency_rates: {CNY: 0.13714}  # USD per CNY
      budget_usd: 20.0              # stop (BudgetExceeded) once the run's ledger reaches this

Keys are never stored: a role names the environment variable that holds its key (`api_key_env`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from mirl.llm.types import ROLES
from mirl.typed import ParamsError

EMBEDDED_MODEL = "local/smollm2"


def _help(text: str, **bounds: float) -> dict[str, object]:
    """A field's metadata: its help text and its range (`min`, `above`, `max`; see `mirl.typed`)."""
    return {"help": text, **bounds}


@dataclass
class RoleConfig:
    """One role's model and sampling settings."""

    model: str = field(default=EMBEDDED_MODEL, metadata=_help(
        "litellm model name: `hosted_vllm/<hf-id>` (with api_base), `openai/...`, `gemini/...`, "
        "`anthropic/...`, the embedded `local/smollm2`, or `scripted/<name>` in tests"))
    temperature: float | None = field(default=None, metadata=_help(
        "sampling temperature; empty = the role default (policy 1.0, every other role 0.7)", min=0))
    top_p: float | None = field(default=None, metadata=_help("nucleus sampling cut-off; empty = provider default", above=0, max=1))
    max_tokens: int = field(default=1024, metadata=_help("most tokens one reply may have", min=1))
    seed: int | None = field(default=0, metadata=_help(
        "sampling seed sent with each request (and part of the cache key); empty = none"))
    api_base: str = field(default="", metadata=_help(
        "server URL for self-hosted/OpenAI-compatible models, e.g. http://host:8000/v1; empty = provider default"))
    api_key_env: str = field(default="", metadata=_help(
        "NAME of the environment variable holding the API key (the key itself is never stored); "
        "empty = the provider's usual variable, as litellm reads it"))
    timeout_s: float = field(default=120.0, metadata=_help("seconds one request may take before it counts as a timeout", above=0))
    batch_n: bool = field(default=True, metadata=_help(
        "ask n samples in one request (`n=`); false for providers without `n` (Anthropic): one request per sample"))
    extra: dict[str, Any] = field(default_factory=dict, metadata=_help(
        "further litellm keyword arguments for this role (e.g. reasoning_effort); part of the cache key"))


@dataclass
class LLMConfig:
    """All LLM roles plus the call path's cache, retry, ledger and budget settings."""

    policy: RoleConfig = field(default_factory=RoleConfig, metadata=_help("the agent being profiled and trained"))
    localizer: RoleConfig = field(default_factory=RoleConfig, metadata=_help("judges each proposed step: good or bad + reason"))
    teacher: RoleConfig = field(default_factory=RoleConfig, metadata=_help("writes a corrected step for a bad one"))
    annotator: RoleConfig = field(default_factory=RoleConfig, metadata=_help("proposes, refines and assigns error types"))
    behavior_judge: RoleConfig = field(default_factory=RoleConfig, metadata=_help("says whether a misbehavior was avoided (r_e)"))
    rubric_writer: RoleConfig = field(default_factory=RoleConfig, metadata=_help("writes rubrics for the RaR+ baseline"))
    rubric_judge: RoleConfig = field(default_factory=RoleConfig, metadata=_help("scores rollouts against rubrics"))
    step_judge: RoleConfig = field(default_factory=RoleConfig, metadata=_help("judges step equivalence (PivotRL)"))

    policy_temperature: float = field(default=1.0, metadata=_help("default temperature of the policy role", min=0))
    judge_temperature: float = field(default=0.7, metadata=_help("default temperature of every other role", min=0))

    cache: bool = field(default=True, metadata=_help(
        "reuse stored answers: a repeated call (same model, messages, sampling, seed, sample index) costs nothing"))
    cache_dir: str = field(default="", metadata=_help(
        "where answers are stored; empty = <run_dir>/llm_cache (a run is self-contained); "
        "`user` = the shared per-user cache (<user cache>/llm_cache), reused across runs"))

    max_tries: int = field(default=5, metadata=_help(
        "attempts per request on transient errors (rate limit, 5xx, timeout, connection) before it fails", min=1))
    backoff_s: float = field(default=2.0, metadata=_help("first retry wait in seconds; doubles each try", min=0))
    backoff_max_s: float = field(default=60.0, metadata=_help("longest wait between tries, in seconds", min=0))
    jitter: float = field(default=0.25, metadata=_help("random extra wait, as a fraction of the wait (0 = none)", min=0))

    json_tries: int = field(default=3, metadata=_help(
        "asks per JSON reply: an invalid reply is re-asked with the validation error appended", min=1))

    budget_usd: float | None = field(default=None, metadata=_help(
        "spend cap for the whole run (all stages in the run's ledger); empty = no cap", min=0))
    stage_budget_usd: dict[str, float] = field(default_factory=dict, metadata=_help(
        "spend cap per stage name, e.g. {profile: 5.0}; checked before each uncached request", min=0))
    prices: dict[str, dict[str, float | str]] = field(default_factory=dict, metadata=_help(
        "price per million tokens per model: {model: {input, cached_input, output, currency}} (currency "
        "default USD); overrides litellm's price map; a model in neither costs 0 and its ledger rows say price=none"))
    currency_rates: dict[str, float] = field(default_factory=dict, metadata=_help(
        "USD per unit of each currency a price names, e.g. {CNY: 0.137}; USD is 1", above=0))

    def __post_init__(self) -> None:
        from mirl.llm.pricing import usd_price

        for model, table in self.prices.items():
            if not isinstance(table, dict):
                raise ParamsError(f"models.prices[{model!r}]: must be a mapping {{input, cached_input, output, "
                                  f"currency}}, got {table!r}")
            try:
                usd_price(model, table, self.currency_rates)
            except (TypeError, ValueError) as e:
                raise ParamsError(f"models.{e}" if str(e).startswith("prices[") else
                                  f"models.prices[{model!r}]: {e}") from None

    def role(self, name: str) -> RoleConfig:
        if name not in ROLES:
            raise ValueError(f"unknown LLM role {name!r}; roles: {', '.join(ROLES)}")
        return getattr(self, name)

    def temperature(self, name: str) -> float:
        t = self.role(name).temperature
        if t is not None:
            return t
        return self.policy_temperature if name == "policy" else self.judge_temperature

    def key_envs(self) -> list[str]:
        return sorted({getattr(self, r).api_key_env for r in ROLES if getattr(self, r).api_key_env})


def with_model(config: LLMConfig | None = None, **role_models: str) -> LLMConfig:
    """A copy of `config` with some roles pointed at other models, e.g. `with_model(policy="scripted/a")`."""
    import copy

    cfg = copy.deepcopy(config or LLMConfig())
    for role, model in role_models.items():
        cfg.role(role).model = model
    return cfg


assert {f.name for f in fields(LLMConfig)} >= set(ROLES), "every role needs a RoleConfig field"
