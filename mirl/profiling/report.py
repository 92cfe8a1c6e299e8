"""Tables and figures of a profiling run, for notebook 01 (cells stay one-liners)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.ticker import MaxNLocator

from mirl import plotstyle
from mirl.jsonl import read_jsonl


def per_environment(trajectories: list[dict[str, Any]], errors: pd.DataFrame) -> pd.DataFrame:
    """Steps, flags, flag rate, discards and mean reward per environment."""
    rows = []
    for t in trajectories:
        rows.append({"env": t["task"], "seed": t["seed"], "steps": len(t.get("steps", [])) - t.get("prefix_len", 0),
                     "discarded": t.get("exit_reason") == "discarded", "reward": t.get("reward")})
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=["env", "steps", "flags", "flag_rate", "discarded", "reward"])
    env = df.groupby("env").agg(steps=("steps", "sum"), discarded=("discarded", "sum"), reward=("reward", "mean"))
    flags = errors.groupby("env").size() if not errors.empty else pd.Series(dtype=int)
    env["flags"] = flags.reindex(env.index).fillna(0).astype(int)
    env["flag_rate"] = (env["flags"] / env["steps"].where(env["steps"] > 0)).fillna(0.0).round(3)
    return env.reset_index().sort_values("flag_rate", ascending=False)[["env", "steps", "flags", "flag_rate", "discarded", "reward"]]


def first_error_index(errors: pd.DataFrame) -> pd.Series:
    """Index of the first flagged step of each (env, seed) that has one."""
    if errors.empty:
        return pd.Series(dtype=int, name="first_error_step")
    return errors.groupby(["env", "seed"])["step"].min().rename("first_error_step")


def flags_by_detector(errors: pd.DataFrame) -> pd.Series:
    if errors.empty:
        return pd.Series(dtype=int, name="flags")
    sources = errors.apply(lambda r: r["detectors"] or [r["source"]], axis=1).explode()
    return sources.value_counts().rename("flags")


def spend_per_role(run_dir: str | Path, stage: str = "profiling") -> pd.DataFrame:
    calls, _ = read_jsonl(Path(run_dir) / "llm_calls.jsonl")
    df = pd.DataFrame(calls)
    if df.empty:
        return pd.DataFrame(columns=["role", "calls", "input_tokens", "cached_input_tokens", "output_tokens", "cost_usd", "cache_hits"])
    if "stage" in df:
        df = df[df["stage"] == stage]
    out = df.groupby("role").agg(calls=("role", "size"), input_tokens=("input_tokens", "sum"),
                                 cached_input_tokens=("cached_input_tokens", "sum"),
                                 output_tokens=("output_tokens", "sum"), cost_usd=("cost_usd", "sum"),
                                 cache_hits=("cache_hit", "sum"))
    return out.reset_index()


def examples(errors: pd.DataFrame, n: int = 8, width: int = 90) -> pd.DataFrame:
    cols = ["env", "seed", "step", "source", "rejected_command", "reason", "correction", "outcome"]
    if errors.empty:
        return pd.DataFrame(columns=cols)
    picked = errors.sort_values(["env", "seed", "step"]).groupby("source", group_keys=False).head(max(1, n // 4)).head(n)[cols]
    for col in ("rejected_command", "reason", "correction"):  # one readable line each; full text is in the files
        picked[col] = picked[col].map(lambda v: v if not isinstance(v, str)
                                      else (" ⏎ ".join(v.splitlines()))[:width] + ("…" if len(v) > width else ""))
    return picked


def profile_figure(env: pd.DataFrame, first: pd.Series, detectors: pd.Series, spend: pd.DataFrame):
    """One figure, four panels: flag rate per env, first error index, flags per detector, spend per role."""
    plotstyle.apply()
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    ax = axes[0, 0]
    if not env.empty:
        top = env.head(25)
        sns.barplot(data=top, y="env", x="flag_rate", ax=ax, color="tab:red")
    ax.set(title="Flag rate per environment (flags / policy steps)", xlabel="flag rate", ylabel="")
    ax = axes[0, 1]
    if not first.empty:
        counts = first.value_counts().reindex(range(int(first.max()) + 1), fill_value=0)
        ax.bar(counts.index, counts.values, width=0.8, color="tab:blue")
        span = max(4, len(counts))  # a few step indices even when every rollout errs at step 0: a bar, not a wall
        ax.set_xlim(-0.6, span - 0.4)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(title="Index of the first flagged step per rollout", xlabel="step index", ylabel="rollouts")
    ax = axes[1, 0]
    if not detectors.empty:
        sns.barplot(x=detectors.values, y=detectors.index, ax=ax, color="tab:purple")
    ax.set(title="Flags per localizer source", xlabel="flags", ylabel="")
    ax = axes[1, 1]
    if not spend.empty and spend["cost_usd"].sum() > 0:
        sns.barplot(data=spend, x="role", y="cost_usd", ax=ax, color="tab:green")
        ax.set(title="Spend per role (USD)", xlabel="", ylabel="USD")
    elif not spend.empty:
        tokens = spend.melt(id_vars="role", value_vars=["input_tokens", "cached_input_tokens", "output_tokens"],
                            var_name="kind", value_name="tokens")
        sns.barplot(data=tokens, x="role", y="tokens", hue="kind", ax=ax)
        ax.set(title="Tokens per role (no priced calls)", xlabel="", ylabel="tokens")
    else:
        ax.set(title="Spend per role (no LLM calls)")
    fig.tight_layout()
    return fig
