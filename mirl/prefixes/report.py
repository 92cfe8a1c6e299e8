"""Tables and figures of the prefix stage, for notebook 03 (cells stay one-liners)."""

from __future__ import annotations

import pandas as pd

from mirl.records.prefix import MODES, Prefix


def frame(prefixes: list[Prefix]) -> pd.DataFrame:
    """One row per sampled prefix: misbehavior, environment, split, verdict per mode, divergence, times."""
    rows = []
    for p in prefixes:
        d = p.divergence or {}
        rows.append({"id": p.id, "misbehavior": p.misbehavior, "env": p.env, "split": p.split, "steps": p.steps,
                     **{m: p.verdict.get(m) for m in MODES}, "masks": ",".join(p.masks),
                     "diverged_at": d.get("step"), "divergence": d.get("kind"),
                     "rerun_s": p.restore.get("rerun_s"), "restore_s": p.restore.get("restore_s"),
                     "error": p.error})
    return pd.DataFrame(rows, columns=["id", "misbehavior", "env", "split", "steps", *MODES, "masks", "diverged_at",
                                       "divergence", "rerun_s", "restore_s", "error"])


def funnel(df: pd.DataFrame) -> pd.DataFrame:
    """Sampled -> kept per misbehavior and mode (the paper's 640 -> 219), with an overall row."""
    def row(g: pd.DataFrame, name: str) -> dict:
        out = {"misbehavior": name, "sampled": len(g), "environments": g["env"].nunique()}
        for m in MODES:
            out[m] = int(g[m].fillna(False).astype(bool).sum())
            out[f"{m} %"] = round(100 * out[m] / len(g), 1) if len(g) else 0.0
        return out

    rows = [row(g, m) for m, g in df.groupby("misbehavior")] + [row(df, "all")]
    return pd.DataFrame(rows)


def masks_used(df: pd.DataFrame) -> pd.Series:
    """How many prefixes each mask helped pass normalized mode."""
    masks = df.loc[df["normalized"].fillna(False).astype(bool) & ~df["exact"].fillna(False).astype(bool), "masks"]
    return masks.str.split(",").explode().loc[lambda s: s != ""].value_counts().rename("prefixes")


def restore_times(df: pd.DataFrame) -> pd.DataFrame:
    """Median rerun time vs snapshot restore time, over the prefixes that have both."""
    both = df.dropna(subset=["rerun_s"])
    out = {"rerun median s": both["rerun_s"].median(), "rerun prefixes": len(both)}
    snap = df.dropna(subset=["restore_s"])
    out.update({"snapshot restore median s": snap["restore_s"].median(), "snapshot prefixes": len(snap)})
    return pd.DataFrame([out])


def figure(df: pd.DataFrame):
    """Left: kept share per mode and misbehavior. Right: where prefixes diverge (step index)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 0.4 * max(df["misbehavior"].nunique(), 3) + 2))
    if df.empty:
        a.text(0.5, 0.5, "no prefixes", ha="center", transform=a.transAxes)
        return fig
    long = df.melt(id_vars=["misbehavior"], value_vars=list(MODES), var_name="mode", value_name="kept")
    long["kept"] = long["kept"].fillna(False).astype(float)
    sns.barplot(data=long, y="misbehavior", x="kept", hue="mode", ax=a, errorbar=None)
    a.set_xlabel("share of sampled prefixes kept")
    a.set_ylabel("")
    div = df.dropna(subset=["diverged_at"])
    if div.empty:
        b.text(0.5, 0.5, "no prefix diverged", ha="center", transform=b.transAxes)
    else:
        sns.histplot(data=div, x="diverged_at", hue="divergence", multiple="stack", discrete=True, ax=b)
    b.set_xlabel("first diverging prefix step")
    fig.tight_layout()
    return fig
