"""Training curves from `metrics.jsonl`: reward and its parts, dead groups, DPPO masking, the
learner/sampler mismatch, loss and entropy, and where a step's time went. `LivePlot` redraws them
after each step while a run trains (in JupyterLab; headless it only collects the rows)."""

from __future__ import annotations

from typing import Any

import pandas as pd

PANELS = [
    ("reward", ["reward", "r_o", "r_e"], "share of valid rollouts"),
    ("groups", ["dead_share", "masked_share", "silent_share"], "share"),
    ("learner", ["loss", "entropy"], ""),
    ("mismatch", ["logprob_abs_diff"], "mean |log pi - log mu|"),
    ("time", ["collect_s", "learner_s", "sync_s"], "seconds per step"),
]


def curves(metrics: pd.DataFrame | list[dict[str, Any]], title: str = ""):
    """One figure with a panel per group of metrics, against the training step."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    df = metrics if isinstance(metrics, pd.DataFrame) else pd.DataFrame(metrics)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.2), squeeze=False)
    for ax, (name, cols, ylabel) in zip(axes[0], PANELS):
        for c in cols:
            if not df.empty and c in df and df[c].notna().any():
                ax.plot(df["step"], df[c], marker="o", ms=3, label=c)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.4g}"))  # each tick its value, no offset
        if ax.lines:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, _missing(df, name), ha="center", va="center", fontsize=8, transform=ax.transAxes, wrap=True)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


RECIPE_PANELS = [("reward", "reward (tests pass and, for mirl, avoided)"), ("r_o", "r_o: tests pass"),
                 ("r_e", "r_e: misbehavior avoided"), ("dead_share", "dead groups (share of tried)"),
                 ("silent_share", "silent rollouts (ran no command)")]


def recipe_curves(run_dir):
    """The training recipes of a run side by side (`runs/<run>/recipes/*/training/metrics.jsonl`): reward,
    r_o, r_e, the dead share and the share of rollouts that ran no command (a reward a judge pays for
    silence shows there) per step, one line per recipe. A recipe without a step yet is named in
    the legend as such; a run without recipes says so."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from mirl.runner.layout import RunDir
    from mirl.training.stage import METRICS, STAGE, load_metrics

    frames = {name: (load_metrics(rd.root) if rd.file(STAGE, METRICS).exists() else pd.DataFrame())
              for name, rd in RunDir(run_dir).recipes().items()}
    if not frames:
        fig, ax = plt.subplots(figsize=(5, 1.6))
        ax.set_axis_off()
        ax.text(0.5, 0.5, "this run has no training recipes\n(a params file lists them under `recipes:`)",
                ha="center", va="center", fontsize=10, transform=ax.transAxes)
        return fig
    last = max([int(df["step"].max()) for df in frames.values() if not df.empty and "step" in df] or [1])
    markers = "osD^vP*X"
    fig, axes = plt.subplots(1, len(RECIPE_PANELS), figsize=(4 * len(RECIPE_PANELS), 3.4), squeeze=False)
    for ax, (col, title) in zip(axes[0], RECIPE_PANELS):
        for k, (name, df) in enumerate(frames.items()):
            label = name if not df.empty else f"{name} (no step yet)"
            if not df.empty and col in df and df[col].notna().any():  # hollow markers: equal values stay visible
                ax.plot(df["step"], df[col], marker=markers[k % len(markers)], ms=7 - k % 4, mfc="none", label=label)
            else:  # no step yet, or a run from before the column: the legend keeps the recipe's place
                ax.plot([], [], label=label)
        if not any(len(line.get_xdata()) for line in ax.lines):
            ax.text(0.5, 0.5, "not measured in these runs", ha="center", va="center", fontsize=8, transform=ax.transAxes)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.set_xlim(0.5, last + 0.5)
        ax.set_ylim(-0.03, 1.03)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=min(last, 10), integer=True, min_n_ticks=1))
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()  # the reward panel's: every recipe that has a step
    axes[0][-1].legend(handles, labels, title="recipe", fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def _missing(df: pd.DataFrame, panel: str) -> str:
    """Why a panel has no curve: no step yet, or (learner panels) no step made an update."""
    if df.empty:
        return "no training step yet"
    if panel in ("learner", "mismatch") and "groups_live" in df and not (df["groups_live"] > 0).any():
        return f"no update in {len(df)} step(s):\nevery group was dead\n(all its rewards equal)"
    return "not measured in these steps"


def starts(run_dir, group_sizes: tuple[int, ...] = (8, 16, 32)) -> pd.DataFrame:
    """One row per start the training drew (`rollouts.jsonl`): its groups, how many were live, its rollouts'
    mean `r_o`, `r_e` and reward, and for a 0/1 reward the share of groups of each size in `group_sizes`
    expected live if every draw of the start passed with its pooled rate p: 1 - p^G - (1-p)^G. A start
    whose rollouts all got the same reward was never live and no group size makes it so; where most starts
    are like that, a dead share near 1 is the starts', not the refilling's (the policy's changes over the
    run are pooled, so read it as a bound on what a larger group would find)."""
    from mirl.jsonl import iter_jsonl
    from mirl.runner.layout import RunDir
    from mirl.training.stage import ROLLOUTS, STAGE

    rows: dict[str, dict[str, Any]] = {}
    for r in iter_jsonl(RunDir(run_dir).file(STAGE, ROLLOUTS)):
        rew = r.get("reward") or {}
        if not rew.get("valid", True):
            continue
        row = rows.setdefault(r["start"], {"start": r["start"], "groups": set(), "live": set(), "rewards": [], "r_o": [], "r_e": []})
        group = (r.get("step"), r.get("draw"))
        row["groups"].add(group)
        if r.get("live"):
            row["live"].add(group)
        row["rewards"].append(float(rew.get("reward") or 0.0))
        row["r_o"].append(float(bool(rew.get("r_o"))))
        row["r_e"].append(float(bool(rew.get("r_e", True))))
    out = []
    for row in rows.values():
        rewards = row["rewards"]
        p = sum(rewards) / len(rewards)
        item = {"start": row["start"], "misbehavior": row["start"].split("|")[0] if "|" in row["start"] else "",
                "groups": len(row["groups"]), "groups_live": len(row["live"]), "rollouts": len(rewards),
                "r_o": sum(row["r_o"]) / len(rewards), "r_e": sum(row["r_e"]) / len(rewards), "reward": p,
                "mixed": min(rewards) != max(rewards)}
        binary = all(x in (0.0, 1.0) for x in rewards)
        for g in group_sizes:
            item[f"live_if_group_{g}"] = 1 - p ** g - (1 - p) ** g if binary else float("nan")
        out.append(item)
    cols = ["start", "misbehavior", "groups", "groups_live", "rollouts", "r_o", "r_e", "reward", "mixed",
            *[f"live_if_group_{g}" for g in group_sizes]]
    return pd.DataFrame(out, columns=cols).sort_values(["mixed", "reward"], ascending=False, ignore_index=True)


def table(metrics: pd.DataFrame) -> pd.DataFrame:
    """The columns a person reads first, one row per step."""
    cols = ["step", "reward", "r_o", "r_e", "groups_live", "groups_surplus", "groups_tried", "dead_share", "invalid", "loss",
            "silent_share", "exit_zero_share", "masked_share", "logprob_abs_diff", "entropy", "loss_tokens", "collect_s", "learner_s", "judge_usd"]
    return metrics[[c for c in cols if c in metrics]]


class LivePlot:
    """`update(row)` after each step: keeps the row and, in a notebook, redraws the curves in place."""

    def __init__(self, title: str = ""):
        self.rows: list[dict[str, Any]] = []
        self.title = title
        self._handle = None

    def update(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            return
        if get_ipython() is None:
            return
        import matplotlib.pyplot as plt

        fig = curves(self.rows, self.title)
        if self._handle is None:
            self._handle = display(fig, display_id=True)
        else:
            self._handle.update(fig)
        plt.close(fig)
