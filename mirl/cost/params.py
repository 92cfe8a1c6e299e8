"""Parameters of the cost report (notebook 07, section `cost` of a params YAML).

Prices default to the paper's table (per million tokens: input, cached input, output), with the
policy priced as a hosted Qwen3.5-4B; they are merged over `models.prices` (this section wins), and
currencies are converted with `currency_rates` merged over `models.currency_rates`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# 1 USD = 7.2917 CNY: the rate at which the paper's CNY prices of Qwen3.8-27B are $0.50 / $0.10 / $3.00
PAPER_PRICES = {
    "Qwen3.5-4B": {"input": 0.33, "cached_input": 0.066, "output": 1.005, "currency": "USD"},
    "Qwen3.8-27B": {"input": 3.646, "cached_input": 0.729, "output": 21.875, "currency": "CNY"},
    "gemini-3.8-flash": {"input": 0.75, "cached_input": 0.075, "output": 3.75, "currency": "USD"},
    "claude-opus-5": {"input": 5.0, "cached_input": 0.5, "output": 25.0, "currency": "USD"},
}
PAPER_RATES = {"CNY": 0.13714}


@dataclass
class CostParams:
    """Flat on purpose: these are the literals of notebook 07's parameters cell."""

    runs: list[str] = field(default_factory=list, metadata={
        "help": "runs to account for and compare (names under runs_root); empty = this run and its training "
                "recipes' runs (runs/<run>/recipes/<recipe>)"})
    reference: str = field(default="", metadata={
        "help": "the run or reported recipe the others are shown relative to (Figure 9); empty = the first "
                "training recipe of the run, else the first run"})
    up_to: str = field(default="selected", metadata={
        "help": "count training up to: selected (the best checkpoint of the training stage's selection), "
                "last, or a step number"})
    up_to_steps: dict[str, int] = field(default_factory=dict, metadata={"min": 0,
        "help": "per-run step to count up to, overriding up_to, e.g. {tmax: 120}"})
    phases: list[str] = field(default_factory=lambda: ["preprocessing", "rl"], metadata={
        "help": "phases counted in the comparisons (preprocessing, rl, evaluation, other)"})
    policy_price: str = field(default="Qwen3.5-4B", metadata={
        "help": "price entry the policy's tokens are billed at, as a hosted service (the paper: Qwen3.5-4B); "
                "empty = the entry of models.policy.model; none found = the policy is left unpriced"})
    policy_rule: Literal["paper", "measured"] = field(default="paper", metadata={
        "help": "paper: 2 / (average steps per rollout) of the policy's input tokens uncached, the rest cached; "
                "measured: the cached tokens the run's generator reported"})
    prices: dict[str, dict[str, float | str]] = field(default_factory=lambda: {k: dict(v) for k, v in PAPER_PRICES.items()},
                                                      metadata={"help": "price per million tokens per model "
                                                                "{input, cached_input, output, currency}, over "
                                                                "models.prices; also prices ledger rows that had none"})
    currency_rates: dict[str, float] = field(default_factory=lambda: dict(PAPER_RATES), metadata={"above": 0,
        "help": "USD per unit of each currency, over models.currency_rates"})
    hardware: dict[str, dict[str, str | int]] = field(default_factory=dict, metadata={
        "help": "devices a stage ran on when it recorded no device time: {stage: {kind: A100, count: 8}}; "
                "its wall time x count is its device time"})
    paper_reference: str = field(default="params/paper_reported.yaml", metadata={
        "help": "file of a paper's reported costs to redraw and overlay (recipes with totals); empty = none"})
