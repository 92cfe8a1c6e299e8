"""Recipes compared: each resource as a share of a reference recipe (the paper's Figure 9), split
by phase, and several recipes side by side (Figure 10).

Both work on one long frame, (recipe, phase, resource, value, source), that runs (`run_frame`)
and reported numbers (`mirl.reported.reported_frame`) both make, so a user's runs sit beside the
paper's. Environments are not additive over phases; a phase counts the environments it adds
(preprocessing first), so the phases of a recipe sum to its distinct environments.
"""

from __future__ import annotations

from mirl.reported import RESOURCES

COLUMNS = ["recipe", "phase", "resource", "value", "source"]
PHASE_ORDER = ("preprocessing", "rl", "evaluation", "other", "total")
FROM_TOTALS = {"rollouts": "rollouts", "input_tokens": "policy_input_tokens", "output_tokens": "policy_output_tokens",
               "gpu_hours": "gpu_hours", "api_usd": "api_usd", "total_usd": "total_usd"}


def _phase_key(phase: str) -> int:
    return PHASE_ORDER.index(phase) if phase in PHASE_ORDER else len(PHASE_ORDER)


def run_frame(resources, priced, phases: tuple[str, ...] | list[str] = ("preprocessing", "rl")):
    """The long frame of runs: `resources` (already cut) and `priced` (its priced totals per run and phase)."""
    import pandas as pd

    rows = []
    for p in priced.itertuples(index=False):
        if phases and p.phase not in phases:
            continue
        for resource, column in FROM_TOTALS.items():
            value = getattr(p, column)
            rows.append({"recipe": p.run, "phase": p.phase, "resource": resource,
                         "value": float(value) if value is not None and value == value else float("nan"),
                         "source": "run"})
    for run, g in resources.dropna(subset=["env"]).groupby("run", sort=False):
        seen: set[str] = set()
        for phase in sorted(g["phase"].unique(), key=_phase_key):
            if phases and phase not in phases:
                continue
            envs = set(g.loc[g["phase"] == phase, "env"]) - seen
            seen |= envs
            rows.append({"recipe": run, "phase": phase, "resource": "environments", "value": float(len(envs)),
                         "source": "run"})
    return pd.DataFrame(rows, columns=COLUMNS)


def recipe_totals(long):
    """recipe x resource: the sum over phases (a NaN phase value makes the total NaN: unpriced)."""
    table = long.groupby(["recipe", "resource"], sort=False)["value"].sum(min_count=1).unstack("resource")
    return table.reindex(columns=[r for r in RESOURCES if r in table.columns])


def relative(long, reference: str):
    """Each row's value as a percentage of the reference recipe's total of that resource (NaN where
    the reference's total is 0 or unknown: no share of nothing)."""
    if reference not in set(long["recipe"]):
        raise ValueError(f"reference {reference!r} is none of the recipes: {', '.join(dict.fromkeys(long['recipe']))}")
    ref = recipe_totals(long).loc[reference]
    base = long["resource"].map(ref)
    out = long.assign(reference=reference, reference_value=base)
    out["percent"] = 100 * out["value"] / base.where(base > 0)
    return out


def side_by_side(long):
    """Totals of every recipe next to each other: one row per resource, one column per recipe."""
    return recipe_totals(long).T
