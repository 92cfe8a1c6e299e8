"""Parameters of the evaluation stages (notebooks 05 and 06, sections `misbehavior_rate` and
`pass_at_k` of a params YAML).

A policy is named as a model is (`local/smollm2`, `hosted_vllm/...`, `local/<checkpoint dir>`), or
by one of two words: `base`, the `models.policy.model` of the params file, and `selected`, the
checkpoint the training stage selected (`training/selection.json`), left out when there is none;
in a run with training recipes (`mirl.recipes`), every recipe's selected checkpoint, named by its recipe.
The judges, the sandbox and the agent's format are the shared sections.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class MisbehaviorRateParams:
    """Flat on purpose: these are the literals of notebook 05's parameters cell."""

    policies: list[str] = field(default_factory=lambda: ["base", "selected"], metadata={
        "help": "policies to evaluate, in order: model names (local/<checkpoint dir> too), base (models.policy.model) "
                "or selected (the training stage's selected checkpoint; with training recipes, each recipe's)"})
    per_misbehavior: int = field(default=20, metadata={"min": 1,
        "help": "held-out prefixes per misbehavior, at most (the first of prefixes/heldout.jsonl) (paper: 20)"})
    samples: int = field(default=16, metadata={"min": 1, "help": "continuations sampled per prefix and policy (paper: 16)"})
    temperature: float = field(default=0.7, metadata={"min": 0, "help": "policy sampling temperature of the continuations (paper: 0.7)"})
    top_p: float = field(default=0.95, metadata={"above": 0, "max": 1, "help": "policy nucleus cut-off of the continuations (paper: 0.95)"})
    judge_steps: int = field(default=5, metadata={"min": 1,
        "help": "policy steps played after the prefix and read by the judges (paper: m = 5)"})
    judges: list[str] = field(default_factory=lambda: ["llm"], metadata={
        "help": "rules (the misbehavior's rule detector, where it has one), llm (models.behavior_judge), "
                "or further LLM judge model names; each continuation is judged by each"})
    judge_models: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={
        "help": "settings of the further LLM judges, by the model name `judges` gives, over models.behavior_judge's "
                "(api_base, api_key_env, extra, max_tokens, ...), e.g. {hosted_vllm/Qwen/Qwen3.8-27B: {api_base: "
                "http://host:8001/v1, extra: {reasoning_effort: low}}}"})
    restore: Literal["auto", "rerun", "snapshot"] = field(default="auto", metadata={
        "help": "how a prefix's sandbox state is made: its kept snapshot (auto), else re-running its commands"})
    verify: bool = field(default=False, metadata={
        "help": "also run the task's tests after each continuation and record its reward (task success from the prefix)"})
    seed: int = field(default=0, metadata={"help": "base of the continuations' seeds (sample i of every prefix: the same seed)"})
    n_boot: int = field(default=2000, metadata={"min": 1, "help": "bootstrap draws (over prefixes) of each rate's interval"})
    workers: int = field(default=16, metadata={"min": 1, "help": "continuations played at once (the embedded engine decodes them as one batch)"})
    budget_usd: float = field(default=0.0, metadata={"min": 0, "help": "stop cleanly once the stage's LLM spend reaches this; 0 = no cap"})


@dataclass
class PassAtKParams:
    """Flat on purpose: these are the literals of notebook 06's parameters cell."""

    policies: list[str] = field(default_factory=lambda: ["base", "selected"], metadata={
        "help": "policies to run, in order (the first is the one the others are compared with): model names, "
                "base or selected, as for misbehavior_rate"})
    tasks: str = field(default="tasks", metadata={
        "help": "task set: a directory of tasks, or comma-separated task dirs; `!<task id>` leaves one out"})
    max_tasks: int = field(default=0, metadata={"min": 0, "help": "use only the first N tasks (sorted by id); 0 = all"})
    runs: int = field(default=3, metadata={"min": 1, "help": "runs (seeds) of every task per policy; pass@k for k = 1..runs (paper: 3)"})
    sources: list[str] = field(default_factory=list, metadata={
        "help": "runs made by other tools to score beside them (Harbor job dirs, Terminal-Bench 1 run dirs), "
                "each agent/model found there a policy of its own"})
    temperature: float | None = field(default=None, metadata={"min": 0,
        "help": "policy sampling temperature; empty = models.policy's"})
    top_p: float | None = field(default=None, metadata={"above": 0, "max": 1, "help": "policy nucleus cut-off; empty = models.policy's"})
    max_steps: int = field(default=0, metadata={"min": 0, "help": "agent steps per episode; 0 = agent.max_steps"})
    errored: Literal["zero", "drop"] = field(default="zero", metadata={
        "help": "errored trials (no reward, or a verifier/sandbox error) count as 0 (zero, the leaderboard's rule) "
                "or are left out (drop)"})
    threshold: float = field(default=1.0, metadata={"help": "reward at which a trial passes, for pass@k (1.0: partial credit fails)"})
    seed: int = field(default=0, metadata={"help": "run r plays with episode seed seed + r"})
    workers: int = field(default=16, metadata={"min": 1, "help": "episodes played at once"})
    budget_usd: float = field(default=0.0, metadata={"min": 0, "help": "stop cleanly once the stage's LLM spend reaches this; 0 = no cap"})
