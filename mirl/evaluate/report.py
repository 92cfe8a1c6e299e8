"""Tables and figures of the evaluation stages, for notebooks 05 and 06 (cells stay one-liners).

Every figure is saved twice, PNG for a look and PDF for a paper (`save`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


def load(run_dir: str | Path, stage: str, name: str) -> pd.DataFrame:
    """A table a stage's finalize wrote (`runs/<run>/<stage>/<name>`), read as written."""
    from mirl.runner.layout import RunDir

    path = RunDir(run_dir).file(stage, name)
    if not path.exists():
        raise FileNotFoundError(f"{path}: not written yet (run the {stage} stage first)")
    return pd.read_csv(path, keep_default_na=True)


def trained_environments(model: str) -> int | None:
    """How many environments the training run behind a checkpoint policy (`local/<run>/training/
    checkpoints/step-N`) trained on, from its training summary; None for any other model."""
    import json

    if not model.startswith("local/"):
        return None
    ckpt = Path(model.split("/", 1)[1])
    if ckpt.parent.name != "checkpoints" or ckpt.parent.parent.name != "training":
        return None
    summary = ckpt.parent.parent / "summary.json"
    try:
        value = json.loads(summary.read_text()).get("environments")
    except (OSError, ValueError):
        return None
    return int(value) if isinstance(value, int) else None


def environment_points(scores: pd.DataFrame, labels: dict[str, str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The paper's Figure 11 for a run's `scores.csv`: (trained, others): each checkpoint policy at the
    number of environments its training run used (`policy`, `environments`, `mean`, `se`), and every
    other policy (`policy`, `mean`), drawn as a horizontal line."""
    labels = labels or {}
    envs = scores["model"].map(lambda m: trained_environments(str(m)))
    df = scores.assign(policy=scores["policy"].map(lambda p: labels.get(p, p)), environments=envs,
                       mean=scores["run_mean"], se=scores["run_se"])
    trained = df[df["environments"].notna()][["policy", "environments", "mean", "se"]]
    return trained.astype({"environments": int}).reset_index(drop=True), \
        df[df["environments"].isna()][["policy", "mean"]].reset_index(drop=True)


def labelled(df: pd.DataFrame, labels: dict[str, str] | None) -> pd.DataFrame:
    out = df.copy()
    out["label"] = out["policy"].map(lambda p: (labels or {}).get(p, p))
    return out


def _bars(ax, table: pd.DataFrame, x: str, hue: str, y: str, low: str | None, high: str | None,
          err: str | None = None, mark_missing: bool = False) -> None:
    """Grouped bars of `y` by `x` and `hue`, with asymmetric error bars (low/high) or +- err; with
    `mark_missing`, a bar without a value says `n/a` where it would stand (else it looks like a 0)."""
    import seaborn as sns

    xs, hues = list(dict.fromkeys(table[x])), list(dict.fromkeys(table[hue]))
    width = 0.8 / max(1, len(hues))
    colors = sns.color_palette("colorblind", len(hues))
    for k, (h, color) in enumerate(zip(hues, colors)):
        part = table[table[hue] == h].set_index(x).reindex(xs)
        pos = np.arange(len(xs)) - 0.4 + width * (k + 0.5)
        values = part[y].astype(float).to_numpy()
        if err is not None:
            yerr = part[err].astype(float).fillna(0).to_numpy()
        elif low is not None and high is not None:
            lows = part[low].astype(float)
            unbounded = np.isneginf(lows.to_numpy())  # a reduction's interval where the base rate was 0 in a draw
            if unbounded.any():
                finite = np.concatenate([lows[~unbounded].dropna().to_numpy(), values[~np.isnan(values)], [-1.0]])
                floor = float(finite.min()) - 0.25
                lows = lows.where(~unbounded, floor)
                for xpos in pos[unbounded]:
                    ax.text(xpos, floor, "-inf", ha="center", va="top", fontsize=7, color="0.35")
            lo = (values - lows).clip(lower=0).fillna(0).to_numpy()
            hi = (part[high].astype(float) - values).clip(lower=0).fillna(0).to_numpy()
            yerr = np.vstack([lo, hi])
        else:
            yerr = None
        ax.bar(pos, np.nan_to_num(values), width=width, color=color, label=h, yerr=yerr, capsize=3,
               error_kw={"elinewidth": 1})
        for xpos in pos[np.isnan(values)] if mark_missing else []:
            ax.text(xpos, 0, "n/a", ha="center", va="bottom", fontsize=7, rotation=90, color="0.35")
    ax.set_xticks(np.arange(len(xs)), xs, rotation=30, ha="right")


# --- notebook 05: misbehavior rates ------------------------------------------------------------------


def _level_ticks(ax) -> None:
    """The x tick labels wrapped and level (misbehavior names are long: slanted, they run into each other)."""
    import textwrap

    labels = [textwrap.fill(t.get_text(), 14) for t in ax.get_xticklabels()]
    ax.set_xticks(ax.get_xticks(), labels, rotation=0, ha="center", fontsize=8)


def rate_figure(rates: pd.DataFrame, labels: dict[str, str] | None = None):
    """The paper's Figure 7: rate per misbehavior (and over all), bars per policy, one panel per
    judge, with the prefix-bootstrap 95% interval."""
    import matplotlib.pyplot as plt

    df = labelled(rates, labels)
    judges = list(dict.fromkeys(df["judge"])) or ["(none)"]
    panel = max(4.0, 0.6 * df["misbehavior"].nunique() * max(1, df["label"].nunique()) + 1.5)
    fig, axes = plt.subplots(1, len(judges), figsize=(panel * len(judges), 4.2), squeeze=False, sharey=True)
    for ax, judge in zip(axes[0], judges):
        part = df[df["judge"] == judge]
        if not part.empty:
            _bars(ax, part, "misbehavior", "label", "rate", "ci_low", "ci_high")
        ax.set_title(f"judge: {judge}")
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("misbehavior rate (95% CI over prefixes)")
    axes[0][-1].legend(title="policy", fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def reduction_figure(reductions: pd.DataFrame, labels: dict[str, str] | None = None):
    """Each policy's relative reduction of the misbehavior rate against the reference policy, per
    misbehavior and over all, with the paired prefix-bootstrap 95% interval; one panel per judge.
    Above 0: the policy repeats the misbehavior less than the reference."""
    import matplotlib.pyplot as plt

    df = labelled(reductions, labels)
    judges = list(dict.fromkeys(df["judge"])) or ["(none)"]
    panel = max(4.5, max(1.3, 0.5 * df["label"].nunique()) * df["misbehavior"].nunique() + 1.5)
    fig, axes = plt.subplots(1, len(judges), figsize=(panel * len(judges), 4.4), squeeze=False, sharey=True)
    for ax, judge in zip(axes[0], judges):
        part = df[df["judge"] == judge]
        if part.empty:
            ax.text(0.5, 0.5, "no policy to compare\n(one policy, or fewer than\ntwo shared prefixes)",
                    ha="center", va="center", fontsize=9, transform=ax.transAxes)
        else:
            _bars(ax, part, "misbehavior", "label", "reduction", "ci_low", "ci_high", mark_missing=True)
            _level_ticks(ax)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_title(f"judge: {judge}")
        ax.grid(axis="y", alpha=0.3)
    reference = next(iter(df["reference"]), "the first policy")
    axes[0][0].set_ylabel(f"relative reduction vs {(labels or {}).get(reference, reference)}\n(95% CI over prefixes)")
    axes[0][0].yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    if not df.empty:
        axes[0][-1].legend(title="policy", fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def reduction_table(reductions: pd.DataFrame, labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Reductions as `42% [10%, 70%] (k prefixes)` per misbehavior (rows) and policy x judge (columns)."""
    df = labelled(reductions, labels)
    if df.empty:
        return pd.DataFrame({"reduction": ["no policy to compare with the first"]})

    def cell(r) -> str:
        if pd.isna(r["reduction"]):
            why = "reference rate 0" if r["base_rate"] == 0 else f"{int(r['prefixes'])} shared prefixes"
            return f"n/a ({why})"
        low = "-inf" if r["ci_low"] == -np.inf else f"{r['ci_low']:.0%}"
        ci = "" if pd.isna(r["ci_low"]) else f" [{low}, {r['ci_high']:.0%}]"
        return f"{r['reduction']:.0%}{ci} ({int(r['prefixes'])} prefixes)"

    df["cell"] = df.apply(cell, axis=1)
    return df.pivot_table(index="misbehavior", columns=["label", "judge"], values="cell", aggfunc="first")


def difference_table(differences: pd.DataFrame, labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Differences of reductions as `+13 points [-2, 26]` per misbehavior (rows) and pair of policies x
    judge (columns); positive: the first of the pair reduced the misbehavior more."""
    if differences.empty:
        return pd.DataFrame({"difference": ["fewer than two policies to compare after the first"]})
    name = (labels or {}).get
    df = differences.copy()
    df["pair"] = [f"{name(a, a)} - {name(b, b)}" for a, b in zip(df["policy"], df["other"])]

    def points(v: float) -> str:
        return "-inf" if v == -np.inf else "inf" if v == np.inf else f"{100 * v:+.0f}"

    def cell(r) -> str:
        if pd.isna(r["difference"]):
            return f"n/a ({int(r['prefixes'])} shared prefixes)"
        ci = "" if pd.isna(r["ci_low"]) else f" [{points(r['ci_low'])}, {points(r['ci_high'])}]"
        return f"{points(r['difference'])} points{ci}"

    df["cell"] = df.apply(cell, axis=1)
    return df.pivot_table(index="misbehavior", columns=["pair", "judge"], values="cell", aggfunc="first", sort=False)


def load_success(run_dir: str | Path) -> pd.DataFrame:
    """Task success from the prefixes (`success.csv`), or an empty table when the stage ran without
    `verify` (no tests, so no success to show)."""
    from mirl.evaluate.misbehavior_rate import STAGE, SUCCESS
    from mirl.evaluate.stats.rates import COLUMNS
    from mirl.runner.layout import RunDir

    path = RunDir(run_dir).file(STAGE, SUCCESS)
    if not path.exists():
        return pd.DataFrame(columns=COLUMNS).rename(columns={"rate": "success"})
    return pd.read_csv(path, keep_default_na=True)


def success_figure(success: pd.DataFrame, labels: dict[str, str] | None = None):
    """Task success from the held-out prefixes (tests after the continuation) per misbehavior and
    over all, bars per policy, prefix-bootstrap 95% intervals."""
    import matplotlib.pyplot as plt

    df = labelled(success, labels)
    panel = max(4.5, max(1.3, 0.5 * df["label"].nunique()) * df["misbehavior"].nunique() + 1.5)
    fig, ax = plt.subplots(figsize=(panel, 4.2))
    if df.empty:
        ax.text(0.5, 0.5, "no tests ran after the continuations\n(misbehavior_rate.verify is off)", ha="center",
                va="center", fontsize=9, transform=ax.transAxes)
    else:
        _bars(ax, df, "misbehavior", "label", "success", "ci_low", "ci_high")
        _level_ticks(ax)
        ax.legend(title="policy", fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("tests pass after the continuation\n(95% CI over prefixes)")
    ax.set_title("task success from the held-out prefixes")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def success_table(success: pd.DataFrame, labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Success from the prefixes as `share [ci_low, ci_high] (n=...)`, laid out as the rates are."""
    return rate_table(success.rename(columns={"success": "rate"}), labels)


def rate_table(rates: pd.DataFrame, labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Rates as `rate [ci_low, ci_high]` per misbehavior (rows) and policy x judge (columns)."""
    df = labelled(rates, labels)

    def cell(r) -> str:
        if pd.isna(r["rate"]):
            return "n/a"
        ci = "" if pd.isna(r["ci_low"]) else f" [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
        return f"{r['rate']:.2f}{ci} (n={int(r['n_samples'])})"

    df["cell"] = df.apply(cell, axis=1)
    return df.pivot_table(index="misbehavior", columns=["label", "judge"], values="cell", aggfunc="first")


def action_table(actions: pd.DataFrame, labels: dict[str, str] | None = None) -> pd.DataFrame:
    """`actions.csv` with each policy by its label, one row per policy."""
    return labelled(actions, labels).set_index("label").drop(columns="policy")


def cut_warnings(summary: dict) -> list[str]:
    """The stage summary's `cut_by_silence` and `cut_by_failing_commands` as lines to print (none when no cut
    vanishes with silence counted or comes with commands that fail)."""
    return ([f"warning: {cut}: the rate fell, but not with a silent continuation counted as not avoiding: the cut is "
             "silence (silence.csv, acting.csv)" for cut in summary.get("cut_by_silence") or []]
            + [f"warning: {cut}: the rate fell, with under half as many of its commands exiting 0 as the first "
               "policy's: read actions.csv and success.csv before the cut" for cut in summary.get("cut_by_failing_commands") or []])


def kappa_table(agreement: pd.DataFrame) -> pd.DataFrame:
    """Cohen's kappa per judge pair (rows) and misbehavior (columns)."""
    if agreement.empty:
        return pd.DataFrame()
    df = agreement.assign(pair=agreement["judge_a"] + " vs " + agreement["judge_b"])
    return df.pivot_table(index="pair", columns="misbehavior", values="kappa", aggfunc="first")


# --- notebook 06: scores and pass@k ------------------------------------------------------------------


def score_table(scores: pd.DataFrame, labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Per policy: the leaderboard score +- SE and interval, and the mean +- SE over runs."""
    df = labelled(scores, labels)
    cols = ["label", "model", "n_tasks", "n_runs", "n_errored", "score", "se", "ci_low", "ci_high", "run_mean",
            "run_se", "errored_rule"]
    return df[cols].set_index("label")


def passk_figure(passk: pd.DataFrame, labels: dict[str, str] | None = None):
    """pass@k against k, one line per policy, with the task-clustered SE."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    df = labelled(passk, labels)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for (label, part), color in zip(df.groupby("label", sort=False), sns.color_palette("colorblind", df["label"].nunique())):
        part = part.sort_values("k")
        ax.errorbar(part["k"], part["mean"], yerr=part["se"].fillna(0), marker="o", capsize=3, label=label, color=color)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k (+- SE over tasks)")
    ax.set_xticks(sorted(df["k"].unique()))
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def solve_counts(per_task: pd.DataFrame, labels: dict[str, str] | None = None) -> pd.DataFrame:
    """How many tasks each policy solved c times, for c = 0..max n (rows: c; columns: policies)."""
    df = labelled(per_task, labels)
    most = int(df["n"].max()) if len(df) else 0
    table = df.groupby(["c", "label"]).size().unstack("label").reindex(range(most + 1)).fillna(0).astype(int)
    table.index.name = "solved runs"
    return table


def solve_count_figure(per_task: pd.DataFrame, labels: dict[str, str] | None = None):
    """The distribution of per-task solve counts: tasks solved in 0, 1, ..., R of their runs."""
    import matplotlib.pyplot as plt

    counts = solve_counts(per_task, labels)
    long = counts.reset_index().melt(id_vars="solved runs", var_name="label", value_name="tasks")
    long["solved runs"] = long["solved runs"].astype(str)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    _bars(ax, long, "solved runs", "label", "tasks", None, None)
    ax.set_xticks(range(len(counts.index)), [str(c) for c in counts.index], rotation=0, ha="center")
    ax.set_xlabel("runs in which the task was solved")
    ax.set_ylabel("tasks")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def seed_curves(trials: pd.DataFrame, errored: str = "zero", min_runs: int = 4) -> pd.DataFrame:
    """`seed_curve` per policy that has at least `min_runs` runs (each run a seed), stacked."""
    from mirl.evaluate.stats.seeds import seed_curve

    frames = []
    for policy, part in trials.groupby("policy", sort=False):
        if part["run"].nunique() < min_runs:
            continue
        # object columns first: `where(..., None)` on a float column (a CSV read back) leaves NaN
        rows = part.assign(**{c: part[c].astype(object).where(part[c].notna(), None)
                              for c in ("reward", "error")}).to_dict("records")
        by_seed = {run: [r for r in rows if r["run"] == run] for run in sorted(part["run"].unique())}
        frames.append(seed_curve(by_seed, errored=errored).assign(policy=policy))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def seed_figure(curves: pd.DataFrame, labels: dict[str, str] | None = None):
    """SE against the number of seeds per policy, with the 1/sqrt(k) reference (the paper's Figure 12a)."""
    import matplotlib.pyplot as plt

    df = labelled(curves, labels)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for label, part in df.groupby("label", sort=False):
        line, = ax.plot(part["k"], part["se"], marker="o", label=f"{label}: SE of k seeds")
        ax.plot(part["k"], part["reference"], linestyle="--", color=line.get_color(), alpha=0.6,
                label=f"{label}: sd / sqrt(k)")
    ax.set_xlabel("seeds k")
    ax.set_ylabel("standard error of the score")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def judgment_counts(judgments: pd.DataFrame) -> pd.DataFrame:
    """Per policy and judge, how many continuations repeated the misbehavior (True), avoided it (False)
    or were judged by none (NaN: a failed continuation, or no rule detector)."""
    return judgments.groupby(["policy", "judge"])["repeated"].value_counts(dropna=False).unstack(fill_value=0)


def save_seed_curves(curves: pd.DataFrame, labels: dict[str, str], report_dir) -> pd.DataFrame | str:
    """The standard error against the number of seeds (`seed_curves`) saved (`seed_curve.csv`, figure
    `seed_curve`); the curves, or why there are none."""
    from mirl import plotstyle

    if curves.empty:
        return "fewer than 4 runs per policy: no seed curve"
    curves.to_csv(Path(report_dir) / "seed_curve.csv", index=False)
    plotstyle.save(seed_figure(curves, labels), report_dir, "seed_curve")
    return curves
