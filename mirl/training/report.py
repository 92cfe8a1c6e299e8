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
    """One row per start with a valid rollout in `rollouts.jsonl`: its groups (`groups_live`: live ones,
    surplus live groups that were played but not trained included; `groups_trained`), its rollouts' mean
    `r_o`, `r_e` and reward, whether they ever differed (`mixed`), and for each size G in `group_sizes` the
    share of its groups expected live if each rollout passed with the start's pooled rate p: 1 - p^G -
    (1-p)^G. A start whose rollouts all got one reward is 0 there (its p may be small but not 0: read
    it as "rarely"); with a reward other than 0/1 anywhere in the run a mixed start's share is NaN. The
    policy's changes over the run are pooled, so the share is a reading of what the starts allowed, not a
    forecast."""
    from mirl.jsonl import iter_jsonl
    from mirl.runner.layout import RunDir
    from mirl.training.stage import ROLLOUTS, STAGE

    rows: dict[str, dict[str, Any]] = {}
    for r in iter_jsonl(RunDir(run_dir).file(STAGE, ROLLOUTS)):
        rew = r.get("reward")
        if not isinstance(rew, dict) or not rew.get("valid", True) or "start" not in r:
            continue
        row = rows.setdefault(r["start"], {"groups": set(), "live": set(), "trained": set(), "rewards": [],
                                           "r_o": [], "r_e": []})
        group = (r.get("step"), r.get("draw"))
        row["groups"].add(group)
        if r.get("live"):
            row["live"].add(group)
        if r.get("trained"):
            row["trained"].add(group)
        row["rewards"].append(float(rew.get("reward") or 0.0))
        row["r_o"].append(float(bool(rew.get("r_o"))))
        row["r_e"].append(float(rew.get("r_e") is not False))
    binary = all(x in (0.0, 1.0) for row in rows.values() for x in row["rewards"])
    out = []
    for start, row in rows.items():
        rewards = row["rewards"]
        n, p = len(rewards), sum(rewards) / len(rewards)
        mixed = min(rewards) != max(rewards)
        item = {"start": start, "misbehavior": start.split("|")[0] if "|" in start else "",
                "groups": len(row["groups"]), "groups_live": len(row["live"]), "groups_trained": len(row["trained"]),
                "rollouts": n, "r_o": sum(row["r_o"]) / n, "r_e": sum(row["r_e"]) / n, "reward": p, "mixed": mixed}
        for g in group_sizes:
            item[f"live_if_group_{g}"] = (1 - p ** g - (1 - p) ** g) if binary else (float("nan") if mixed else 0.0)
        out.append(item)
    cols = ["start", "misbehavior", "groups", "groups_live", "groups_trained", "rollouts", "r_o", "r_e", "reward",
            "mixed", *[f"live_if_group_{g}" for g in group_sizes]]
    return pd.DataFrame(out, columns=cols).sort_values(["mixed", "reward"], ascending=False, ignore_index=True)


def live_shares(starts_table: pd.DataFrame) -> dict[str, float]:
    """The share of groups live as drawn (`observed`) and expected per group size, each start weighted by
    the groups drawn from it (so a start drawn often counts as often)."""
    groups = starts_table["groups"].sum() if len(starts_table) else 0
    if not groups:
        return {}
    shares = {"observed": float(starts_table["groups_live"].sum() / groups)}
    for c in starts_table:
        if c.startswith("live_if_group_"):
            col = starts_table[c]
            shares[c.removeprefix("live_if_group_")] = (float("nan") if col.isna().any()
                                                        else float((col * starts_table["groups"]).sum() / groups))
    return shares


def starts_summary(starts_table: pd.DataFrame) -> str:
    """One line for the notebook: how many starts ever varied, and `live_shares`."""
    shares = live_shares(starts_table)
    parts = [f"{k if k == 'observed' else 'groups of ' + k}: {v:.3f}" for k, v in shares.items()]
    return (f"{int(starts_table['mixed'].sum()) if len(starts_table) else 0} of {len(starts_table)} starts ever gave "
            f"different rewards; share of groups live: {', '.join(parts) or 'no groups yet'}")


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
