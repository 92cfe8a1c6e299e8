"""The paper's own cost arithmetic (its Appendix C, Figures 9-10, Table 4), recomputed from its inputs.

The paper measures most resources from its logs and estimates the rest; these functions redo every
step that its printed numbers allow, so a reader can see which figures follow from which inputs:

    rollouts of a run it did not log     S * B * G / (1 - d)            (TMax-4B: 75.9K)
    environments of such a run           S * B / (1 - d)                (TMax-4B: 2,370)
    rollouts of a recipe up to step s    preprocessing + s * B * G / (1 - d_recipe)
                                         (MiRL: 2,017 x 2 profiling rollouts + 100 steps; RaR+: 80 steps;
                                          PivotRL: 3,892 candidates x 8 actions + 595 steps)
    the policy's price                   input x (u x p_in + (1 - u) x p_cached) + output x p_out, with
                                         u = 2 / (average steps per rollout), at Tinker's prices (Table 4)
    total cost                           the policy's price + the other roles' API fees (GPU hours apart)

`paper_arithmetic` lays them side by side with what the paper prints; where an input is not printed
(a recipe's average steps per rollout), it gives the value the printed totals imply instead, marked
so. `mirl.cost.policy` holds the pricing rule the kit's own cost report uses on a run's logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mirl.cost.policy import PER_MILLION, estimate_rollouts, policy_cost_usd


def estimate_environments(steps: float, batch: float, dead_share: float) -> float:
    """Environments drawn by a run that did not log them: S * B / (1 - d) (every drawn group is one)."""
    if not 0 <= dead_share < 1:
        raise ValueError(f"dead_share must be in [0, 1), got {dead_share!r}")
    return steps * batch / (1 - dead_share)


def recipe_rollouts(steps: float, batch: float, group: float, dead_share: float, preprocessing: float = 0.0) -> float:
    """Rollouts of a recipe up to training step `steps`: its preprocessing rollouts plus S * B * G / (1 - d)."""
    return preprocessing + estimate_rollouts(steps, batch, group, dead_share)


def implied_steps_per_rollout(total_usd: float, api_usd: float, input_tokens: float, output_tokens: float,
                              price: Mapping[str, float]) -> float | None:
    """The average steps per rollout for which the paper's rule prices the policy's tokens at
    `total_usd - api_usd`; None when no uncached share in (0, 1] gives that price."""
    p_in, p_out = float(price["input"]), float(price["output"])
    p_cached = float(price.get("cached_input", p_in))
    policy = total_usd - api_usd - output_tokens * p_out / PER_MILLION
    if input_tokens <= 0 or p_in == p_cached:
        return None
    share = (policy * PER_MILLION / input_tokens - p_cached) / (p_in - p_cached)
    if not 0 < share <= 1:
        return None
    return 2 / share if share < 1 else 1.0


def paper_arithmetic(reported: dict[str, Any], policy_price: Mapping[str, float]) -> list[dict[str, Any]]:
    """Rows {quantity, printed, recomputed, how}: each number of Figures 9 and 10 that the paper's inputs
    determine, recomputed (`how` says from what); for totals whose steps per rollout the paper does not
    print, the steps its numbers imply. `reported` is `mirl.reported.read()`; `policy_price` the policy's
    USD prices per million tokens (Table 4's Qwen3.5-4B at Tinker)."""
    f9, f10 = reported["figure9"], reported["figure10"]
    r9, r10 = f9["recipes"], f10["recipes"]
    est, inp, dead, best = f9["estimate"], f10["inputs"], f10["dead_groups"], f10["best_checkpoint"]
    rows: list[dict[str, Any]] = []

    def row(quantity: str, printed: float | None, value: float | None, how: str) -> None:
        rows.append({"quantity": quantity, "printed": printed, "recomputed": value, "how": how})

    d4 = est["dead_share"]
    row("TMax-4B rollouts", r9["TMax-4B"]["total"]["rollouts"], estimate_rollouts(est["steps"], est["batch"], est["group"], d4),
        f"S*B*G/(1-d) = {est['steps']:g}*{est['batch']:g}*{est['group']:g}/(1-{d4:g})")
    row("TMax-4B environments", r9["TMax-4B"]["total"]["environments"], estimate_environments(est["steps"], est["batch"], d4),
        f"S*B/(1-d) = {est['steps']:g}*{est['batch']:g}/(1-{d4:g})")
    b, g = inp["batch"], inp["group"]
    profiling = inp["profiled_environments"] * inp["rollouts_per_environment"]
    row("MiRL rollouts", r10["MiRL"]["total"]["rollouts"],
        recipe_rollouts(best["MiRL"], b, g, dead["MiRL"], profiling),
        f"{inp['profiled_environments']:g}*{inp['rollouts_per_environment']:g} profiling + "
        f"{best['MiRL']:g}*{b:g}*{g:g}/(1-{dead['MiRL']:g}) up to step {best['MiRL']:g}")
    row("RaR+ rollouts", r10["RaR+"]["total"]["rollouts"], recipe_rollouts(best["RaR+"], b, g, dead["RaR+"]),
        f"{best['RaR+']:g}*{b:g}*{g:g}/(1-{dead['RaR+']:g}) up to step {best['RaR+']:g}")
    pre = inp["pivot_candidates"] * inp["actions_per_pivot"]
    row("PivotRL rollouts", r10["PivotRL"]["total"]["rollouts"], recipe_rollouts(best["PivotRL"], b, g, dead["PivotRL"], pre),
        f"{inp['pivot_candidates']:g}*{inp['actions_per_pivot']:g} step-profiling actions + "
        f"{best['PivotRL']:g}*{b:g}*{g:g}/(1-{dead['PivotRL']:g}) up to step {best['PivotRL']:g}")
    tmax = r10["TMax-189"]["total"]["rollouts"]
    row("TMax-189 best step (not printed)", None, tmax * (1 - dead["TMax-189"]) / (b * g),
        f"implied by its {tmax:g} rollouts: R*(1-d)/(B*G), d = {dead['TMax-189']:g}")
    for what, key in (("rollouts", "rollouts"), ("input tokens", "input_tokens"), ("output tokens", "output_tokens"),
                      ("environments", "environments"), ("GPU hours", "gpu_hours"), ("total cost", "total_usd")):
        mine, ref = r9["MiRL"]["total"][key], r9["TMax-4B"]["total"][key]
        row(f"MiRL {what}, % change against TMax-4B", f9["change_percent"].get(key), 100 * (mine / ref - 1),
            f"100*({mine:g}/{ref:g} - 1)")
    one = r10["PivotRL"]["total"]
    row("PivotRL total cost", one["total_usd"], policy_cost_usd(one["input_tokens"], one["output_tokens"], 1.0, policy_price)
        + one["api_usd"], "one step per rollout, so all input uncached (u = 1), + its API fee")
    for name, r in [*r10.items(), ("TMax-4B", r9["TMax-4B"])]:
        t = r["total"]
        steps = implied_steps_per_rollout(t["total_usd"], t.get("api_usd", 0.0), t["input_tokens"], t["output_tokens"],
                                          policy_price)
        row(f"{name} steps per rollout (not printed)", None, steps,
            "what the paper's rule needs for its printed total: 2 / (average steps) of the input uncached")
    return rows
