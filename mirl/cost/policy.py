"""The paper's pricing of policy tokens, and its estimate of a run's rollouts.

The policy is priced as if a hosted service served it. Within one rollout every turn's prompt
extends the previous one, so a provider's prompt cache serves most input tokens; the paper counts
2 / (average steps per rollout) of the input tokens as uncached and the rest at the cached price.
"""

from __future__ import annotations

from collections.abc import Mapping

PER_MILLION = 1_000_000


def uncached_share(steps_per_rollout: float) -> float:
    """The share of input tokens priced uncached: 2 / steps, at most 1 (a one-step rollout has no cache)."""
    steps = float(steps_per_rollout)
    if steps <= 0:
        raise ValueError(f"steps_per_rollout must be positive, got {steps_per_rollout!r}")
    return min(1.0, 2.0 / steps)


def policy_cost_usd(input_tokens: float, output_tokens: float, steps_per_rollout: float,
                    price: Mapping[str, float]) -> float:
    """USD for the policy's tokens by the paper's rule; `price`: {input, cached_input, output} in USD
    per million tokens (cached_input defaults to input)."""
    p_in = float(price["input"])
    p_cached = float(price.get("cached_input", p_in))
    p_out = float(price["output"])
    u = uncached_share(steps_per_rollout)
    inp = float(input_tokens)
    return (inp * u * p_in + inp * (1 - u) * p_cached + float(output_tokens) * p_out) / PER_MILLION


def measured_policy_cost_usd(input_tokens: float, cached_input_tokens: float, output_tokens: float,
                             price: Mapping[str, float]) -> float:
    """USD for the policy's tokens with the cached share the run measured (its generator's prefix cache)."""
    p_in = float(price["input"])
    p_cached = float(price.get("cached_input", p_in))
    uncached = max(0.0, float(input_tokens) - float(cached_input_tokens))
    return (uncached * p_in + float(cached_input_tokens) * p_cached + float(output_tokens) * float(price["output"])) \
        / PER_MILLION


def estimate_rollouts(steps: int, batch: int, group: int, dead_share: float) -> float:
    """Rollouts of a run that did not log them: S * B * G / (1 - d) (steps, live groups per step, group
    size, share of drawn groups that were dead and dropped). TMax-4B: 200 * 8 * 32 / 0.675 = 75.9K."""
    if not 0 <= dead_share < 1:
        raise ValueError(f"dead_share must be in [0, 1), got {dead_share!r}")
    return steps * batch * group / (1 - dead_share)
