"""Tables and figures of a finished small-scale run (`scripts/small_scale.py summarize`).

Writes under DOCS: misbehavior_rates.csv (recipe, misbehavior, rate, ci_low, ci_high, n: the rule
judge's rate per held-out misbehavior, prefix-bootstrap 95% intervals, n judged continuations),
success_from_prefixes.csv (the same continuations' test outcome), reduction.csv (relative change of
each recipe's rate against the base policy), training.csv (per recipe: steps, rollouts, reward),
times.csv (wall time per phase), and the figures misbehavior_rates, success_from_prefixes and
training_curves (PNG only).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

RECIPES = ["mirl", "outcome-prefix", "tmax"]
ORDER = ["base", *RECIPES]
N_BOOT, LEVEL = 2000, 0.95


def recipe_of(policy: str) -> str:
    """`base`, or the recipe whose run dir (runs/small-RECIPE/...) holds the checkpoint."""
    if policy == "base":
        return "base"
    parts = Path(policy.split("/", 1)[-1]).parts
    return next((r for r in RECIPES if f"small-{r}" in parts), policy)


def load_continuations(work: Path) -> pd.DataFrame:
    rows = []
    for line in (work / "runs" / "small" / "misbehavior_rate" / "continuations.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        rule = next((j for j in r.get("judgments", []) if j.get("judge") == "rules"), None)
        rows.append({"recipe": recipe_of(r["policy"]), "misbehavior": r["misbehavior"], "prefix_id": r["prefix_id"],
                     "sample": r["sample"], "valid": r.get("valid", False),
                     "repeated": None if rule is None else rule.get("repeated"),
                     "reward": r.get("reward")})
    return pd.DataFrame(rows)


def interval(df: pd.DataFrame, col: str, seed: int) -> dict:
    from mirl.evaluate.stats.rates import bootstrap_ci

    vals = df[col].astype(float).to_numpy()
    low, high = bootstrap_ci(vals, list(df["prefix_id"]), N_BOOT, seed, LEVEL)
    return {"rate": float(vals.mean()) if len(vals) else np.nan, "ci_low": low, "ci_high": high, "n": len(vals),
            "n_prefixes": df["prefix_id"].nunique()}


def per_group(df: pd.DataFrame, col: str) -> pd.DataFrame:
    out = []
    for (recipe, m), g in df.groupby(["recipe", "misbehavior"]):
        out.append({"recipe": recipe, "misbehavior": m, **interval(g, col, 0)})
    for recipe, g in df.groupby("recipe"):
        out.append({"recipe": recipe, "misbehavior": "all", **interval(g, col, 0)})
    t = pd.DataFrame(out)
    t["order"] = t["recipe"].map({r: i for i, r in enumerate(ORDER)})
    return t.sort_values(["misbehavior", "order"]).drop(columns="order").reset_index(drop=True)


def bars(table: pd.DataFrame, ylabel: str, title: str):
    import matplotlib.pyplot as plt

    ms = [m for m in table["misbehavior"].unique() if m != "all"] + ["all"]
    fig, ax = plt.subplots(figsize=(1.9 * len(ms) + 2, 3.6))
    width = 0.8 / len(ORDER)
    for k, recipe in enumerate(ORDER):
        sub = table[table["recipe"] == recipe].set_index("misbehavior").reindex(ms)
        x = np.arange(len(ms)) + (k - (len(ORDER) - 1) / 2) * width
        err = np.vstack([(sub["rate"] - sub["ci_low"]).clip(lower=0).fillna(0),
                         (sub["ci_high"] - sub["rate"]).clip(lower=0).fillna(0)])
        ax.bar(x, sub["rate"], width, yerr=err, capsize=2, label=recipe)
    ax.set_xticks(np.arange(len(ms)))
    ax.set_xticklabels([m.replace(" ", "\n", 2) for m in ms], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, ncol=4)
    fig.tight_layout()
    return fig


def training(work: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, curves = [], []
    for recipe in RECIPES:
        f = work / "runs" / f"small-{recipe}" / "training" / "metrics.jsonl"
        if not f.exists():
            continue
        m = pd.DataFrame([json.loads(x) for x in f.read_text().splitlines() if x.strip()])
        m["recipe"] = recipe
        curves.append(m)
        rows.append({"recipe": recipe, "steps": int(m["step"].max()), "rollouts": int(m["rollouts"].sum()),
                     "invalid": int(m["invalid"].sum()), "groups_live": int(m["groups_live"].sum()),
                     "groups_tried": int(m["groups_tried"].sum()),
                     "reward_first5": round(float(m["reward"].head(5).mean()), 4),
                     "reward_last5": round(float(m["reward"].tail(5).mean()), 4),
                     "r_o_first5": round(float(m["r_o"].head(5).mean()), 4),
                     "r_o_last5": round(float(m["r_o"].tail(5).mean()), 4),
                     "r_e_first5": round(float(m["r_e"].head(5).mean()), 4) if m["r_e"].notna().any() else None,
                     "r_e_last5": round(float(m["r_e"].tail(5).mean()), 4) if m["r_e"].notna().any() else None})
    return pd.DataFrame(rows), (pd.concat(curves, ignore_index=True) if curves else pd.DataFrame())


def curves_figure(curves: pd.DataFrame):
    import matplotlib.pyplot as plt

    cols = [c for c in ("reward", "r_o", "r_e", "dead_share") if c in curves]
    fig, axes = plt.subplots(1, len(cols), figsize=(3.2 * len(cols), 3.0))
    for ax, col in zip(np.atleast_1d(axes), cols):
        for recipe, g in curves.groupby("recipe"):
            if g[col].notna().any():
                ax.plot(g["step"], g[col].astype(float), marker=".", label=recipe)
        ax.set_title(col, fontsize=10)
        ax.set_xlabel("step")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def summarize(work: Path, docs: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    docs.mkdir(parents=True, exist_ok=True)
    cont = load_continuations(work)
    judged = cont[cont["valid"] & cont["repeated"].notna()].copy()
    judged["repeated"] = judged["repeated"].astype(bool)
    rates = per_group(judged, "repeated")
    rates[["recipe", "misbehavior", "rate", "ci_low", "ci_high", "n"]].to_csv(docs / "misbehavior_rates.csv",
                                                                           index=False, float_format="%.4f")
    verified = cont[cont["valid"] & cont["reward"].notna()].copy()
    verified["success"] = verified["reward"].astype(float) >= 1.0
    success = per_group(verified, "success").rename(columns={"rate": "success"})
    success.to_csv(docs / "success_from_prefixes.csv", index=False, float_format="%.4f")
    # matched prefixes: those of the trained policy evaluated on the most of them (base has them all;
    # a policy whose evaluation was cut short shows its rows over the part of them it reached, with n)
    trained = [r for r in RECIPES if r in set(judged["recipe"])]
    cover = {r: set(judged.loc[judged["recipe"] == r, "prefix_id"]) for r in trained}
    common = max(cover.values(), key=len) if cover else set(judged["prefix_id"])
    matched = per_group(judged[judged["prefix_id"].isin(common)], "repeated")
    matched[["recipe", "misbehavior", "rate", "ci_low", "ci_high", "n", "n_prefixes"]].to_csv(
        docs / "misbehavior_rates_matched.csv", index=False, float_format="%.4f")
    success_matched = per_group(verified[verified["prefix_id"].isin(common)], "success").rename(
        columns={"rate": "success"})
    success_matched.to_csv(docs / "success_from_prefixes_matched.csv", index=False, float_format="%.4f")
    base = matched[matched["recipe"] == "base"].set_index("misbehavior")["rate"]
    red = matched[matched["recipe"] != "base"].copy()
    red["base_rate"] = red["misbehavior"].map(base)
    red["relative_reduction"] = 1 - red["rate"] / red["base_rate"]
    red[["recipe", "misbehavior", "base_rate", "rate", "relative_reduction", "n"]].to_csv(
        docs / "reduction.csv", index=False, float_format="%.4f")
    bars(matched, "misbehavior rate (rule judge)", "Held-out prefixes: share of continuations repeating the "
         "misbehavior (95% prefix bootstrap)").savefig(docs / "misbehavior_rates.png", dpi=150)
    bars(success_matched.rename(columns={"success": "rate"}), "tests pass", "Task success from the held-out prefixes (95% prefix bootstrap)").savefig(
        docs / "success_from_prefixes.png", dpi=150)
    train, curves = training(work)
    train.to_csv(docs / "training.csv", index=False)
    if len(curves):
        curves_figure(curves).savefig(docs / "training_curves.png", dpi=150)
    tf = work / "times.json"
    if tf.exists():
        t = json.loads(tf.read_text())
        pd.DataFrame([{"phase": k, **v} for k, v in t.items()]).to_csv(docs / "times.csv", index=False)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(rates.to_string(index=False))
        print(matched.to_string(index=False))
        print(success.to_string(index=False))
        print(success_matched.to_string(index=False))
        print(red.to_string(index=False))
        print(train.to_string(index=False))
