"""Totals of resource tables: cut up to a checkpoint, summed per phase or stage, priced.

Total cost = the policy's tokens priced by the paper's rule (`mirl.cost.policy`; or with the cached
share the run measured, `rule="measured"`) + the API fees of every other LLM role. GPU hours are
reported beside it, never added to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mirl.cost.policy import measured_policy_cost_usd, policy_cost_usd
from mirl.cost.resources import AMOUNTS, TRAINING
from mirl.llm.pricing import usd_price
from mirl.runner.devices import is_gpu
from mirl.runner.layout import RunDir

TOTALS = ["rollouts", "policy_calls", "policy_input_tokens", "policy_cached_input_tokens", "policy_output_tokens",
          "llm_calls", "api_usd", "environments", "gpu_hours", "device_hours", "wall_hours", "sandbox_hours"]


def checkpoint_step(run_dir: str | Path, up_to: str | int = "selected") -> int | None:
    """The training step a cut ends at: `selected` (the paper's best checkpoint: the training
    stage's selection, validation's pick when it ran), `last`, or a step number; None for a run
    without training steps."""
    from mirl.cost.resources import metrics

    run = RunDir(run_dir)
    steps = [int(m["step"]) for m in metrics(run)]
    if not steps:
        return None
    text = str(up_to).strip()
    if text == "last" or text == "":
        return max(steps)
    if text == "selected":
        from mirl.runner.inputs import selected_step

        step = selected_step(run)[1]
        return step if step is not None else max(steps)
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"up_to must be `selected`, `last` or a step number, got {up_to!r}") from None


def up_to(df, step: int | None):
    """Rows up to and including training step `step` (all preprocessing rows; None = no cut)."""
    if step is None:
        return df
    train = df["stage"] == TRAINING
    keep = ~train | df["step"].isna() | (df["step"].fillna(0) <= step)
    return df[keep.astype(bool)]


def totals(df, by: Sequence[str] = ("run", "phase")):
    """Sums per group, with environments (distinct), GPU and other device hours, wall and sandbox hours."""
    import pandas as pd

    keys = list(by)
    if df.empty:
        return pd.DataFrame(columns=keys + TOTALS)
    df = df.assign(gpu_s=df["device_s"].where(df["device"].map(lambda d: isinstance(d, str) and is_gpu(d)), 0.0))
    sums = df.groupby(keys, dropna=False)[[*AMOUNTS, "gpu_s"]].sum()
    envs = df.dropna(subset=["env"]).groupby(keys, dropna=False)["env"].nunique()
    out = sums.assign(environments=envs.reindex(sums.index).fillna(0).astype(int),
                      gpu_hours=sums["gpu_s"] / 3600, device_hours=sums["device_s"] / 3600,
                      wall_hours=sums["wall_s"] / 3600, sandbox_hours=sums["sandbox_s"] / 3600)
    return out[TOTALS].reset_index()


def price(df, policy_price: Mapping[str, Any] | None, rule: str = "paper",
          rates: Mapping[str, float] | None = None):
    """`totals` plus steps_per_rollout, policy_usd (None without a price) and total_usd.

    The paper's rule uses each group's own average steps per rollout (policy calls / rollouts); a
    group without rollouts (ledger-only policy calls) has every input token priced uncached."""
    out = df.copy()
    steps = (out["policy_calls"] / out["rollouts"].where(out["rollouts"] > 0)).fillna(1.0).clip(lower=1.0)
    out["steps_per_rollout"] = steps
    if policy_price is None:
        out["policy_usd"] = None
        out["total_usd"] = out["api_usd"]
        return out
    usd = usd_price("policy", dict(policy_price), dict(rates or {}))
    if rule == "paper":
        policy = [policy_cost_usd(i, o, s, usd) for i, o, s in
                  zip(out["policy_input_tokens"], out["policy_output_tokens"], steps)]
    elif rule == "measured":
        policy = [measured_policy_cost_usd(i, c, o, usd) for i, c, o in
                  zip(out["policy_input_tokens"], out["policy_cached_input_tokens"], out["policy_output_tokens"])]
    else:
        raise ValueError(f"policy pricing rule must be `paper` or `measured`, got {rule!r}")
    out["policy_usd"] = policy
    out["total_usd"] = out["policy_usd"] + out["api_usd"]
    return out


def by_role(df, priced):
    """Calls, tokens and USD per (run, role): the policy at its priced cost (`priced`: `price` of the
    same rows, per run and phase, summed), every other role at its API fees."""
    import pandas as pd

    cols = ["llm_calls", "llm_input_tokens", "llm_cached_input_tokens", "llm_output_tokens", "api_usd"]
    out = df[df["source"] == "llm"].groupby(["run", "role"], dropna=False)[cols].sum().reset_index()
    out["usd"] = out["api_usd"].astype(float)
    policy = priced.groupby("run")["policy_usd"].sum(min_count=1)
    for run, usd in policy.items():
        mask = (out["run"] == run) & (out["role"] == "policy")
        if not mask.any():
            out = pd.concat([out, pd.DataFrame([{"run": run, "role": "policy", **dict.fromkeys(cols, 0)}])],
                            ignore_index=True)
            mask = (out["run"] == run) & (out["role"] == "policy")
        out.loc[mask, "usd"] = usd
    return out.sort_values(["run", "usd"], ascending=[True, False], na_position="last").reset_index(drop=True)


def where_the_money_went(priced_stages, roles, top: int = 3) -> list[str]:
    """Plain sentences: per run, the stages and roles that cost the most, with their share of the total."""
    lines = []
    for run, g in priced_stages.groupby("run", sort=False):
        total = float(g["total_usd"].fillna(0).sum())
        if total <= 0:
            lines.append(f"{run}: no priced spend (no policy price and no API fees)")
            continue
        stages = g[g["total_usd"].fillna(0) > 0].sort_values("total_usd", ascending=False).head(top)
        lines.append(f"{run}: ${total:,.2f} in all; top stages: " + ", ".join(
            f"{s.stage} ${s.total_usd:,.2f} ({s.total_usd / total:.0%})" for s in stages.itertuples()))
        r = roles[(roles["run"] == run) & (roles["usd"].fillna(0) > 0)].head(top)
        if len(r):
            lines.append(f"{run}: top roles: " + ", ".join(
                f"{x.role} ${x.usd:,.2f} ({x.usd / total:.0%})" for x in r.itertuples()))
    return lines
