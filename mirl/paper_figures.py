"""The paper's figures redrawn beside a run: the numbers of `mirl.reported` in grey, the run's in colour.

    figure3c  prefix funnel             notebook 03   funnel_beside
    figure4   error steps per type      notebook 02   shares_beside (two panels: steps, environments)
    table2    the kept misbehaviors     notebook 02   table2_beside
    figure5   benchmark scores          notebook 06   scores_beside
    figure6   ablations                 notebook 06   scores_beside(..., figure="figure6")
    figure7   misbehavior rates         notebook 05   rates_beside, reduction_figure (band: the mean rate)
    figure8   pass@k, solve counts      notebook 06   passk_beside, solved_beside
    figure11  score vs environments     notebook 06   environments_beside
    figure12  SE vs seeds, 16 seeds     notebook 06   seed_se_beside, seed_scores_beside
    table4    prices                    notebook 07   prices_beside

(Figures 9 and 10, the costs, are drawn by `mirl.cost.plots`.) `bars_of` and `lines_of` read a drawn
panel back, for tests.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from mirl.reported import BENCHMARKS, JUDGES

PAPER, RUN = "#8c8c8c", "#3b6ea8"


# --- drawing helpers ------------------------------------------------------------------------------------


def _bar_panel(ax, rows: list[tuple[str, float, float | None, bool]], xlabel: str, title: str, xmax: float | None = None):
    """Horizontal bars, one per (label, value, error, is_paper) row: the paper's grey, the run's blue.
    A row with value NaN is named but has no bar ("not printed")."""
    for i, (_, value, err, paper) in enumerate(rows):
        if value != value:
            ax.text(0.0, i, " not printed", va="center", fontsize=7, color=PAPER)
            continue
        ax.barh(i, value, xerr=err, capsize=3 if err else 0, color=PAPER if paper else RUN,
                label="paper" if paper else "run")
        ax.text(value + (err or 0) + 0.005, i, f"{value:.3g}", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    top = max([r[1] + (r[2] or 0) for r in rows if r[1] == r[1]] or [0.0])
    # room for the value written past the longest bar, also when a fixed scale (shares: 1) is reached
    ax.set_xlim(0, max(xmax, top * 1.12) if xmax is not None else max(0.05, top * 1.2))
    ax.set_xlabel(xlabel)
    ax.set_title(title)


def bars_of(ax) -> list[tuple[str, float]]:
    """(y tick label, bar width) of a horizontal bar panel drawn here: what a test reads back."""
    labels = {round(t.get_position()[1]): t.get_text() for t in ax.get_yticklabels()}
    return [(labels.get(round(p.get_y() + p.get_height() / 2), ""), round(p.get_width(), 6)) for p in ax.patches
            if p.get_width() > 0 and p.get_height() < 1]


def lines_of(ax) -> dict[str, tuple[list[float], list[float]]]:
    """label -> (x, y) of every labelled line of a panel, error-bar lines included: what a test reads back."""
    out = {ln.get_label(): ([float(x) for x in ln.get_xdata()], [round(float(y), 9) for y in ln.get_ydata()])
           for ln in ax.get_lines() if not ln.get_label().startswith("_")}
    for c in ax.containers:
        if hasattr(c, "lines") and c.lines and c.lines[0] is not None and not str(c.get_label()).startswith("_"):
            ln = c.lines[0]
            out[c.get_label()] = ([float(x) for x in ln.get_xdata()], [round(float(y), 9) for y in ln.get_ydata()])
    return out


# --- figure 3c: the prefix funnel ----------------------------------------------------------------------


def funnel_beside(funnel: pd.DataFrame, reported: dict[str, Any], mode: str = "exact"):
    """Share of sampled prefixes kept by the rerun check: the paper's, then the run's (overall and per
    misbehavior), from `mirl.prefixes.report.funnel`'s table."""
    import matplotlib.pyplot as plt

    paper = reported["figure3c"]
    rows = [("paper (all)", paper["kept"] / paper["sampled"], f"{paper['kept']:.0f}/{paper['sampled']:.0f}")]
    for _, r in funnel.iterrows():
        name = "run (all)" if r["misbehavior"] == "all" else f"run: {r['misbehavior']}"
        rows.append((name, r[mode] / r["sampled"] if r["sampled"] else 0.0, f"{r[mode]:.0f}/{r['sampled']:.0f}"))
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.2))
    names, shares, notes = zip(*rows)
    colors = [PAPER] + [RUN] * (len(rows) - 1)
    bars = ax.barh(range(len(rows)), shares, color=colors)
    for b, note in zip(bars, notes):
        ax.text(b.get_width() + 0.01, b.get_y() + b.get_height() / 2, note, va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), names)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.1)
    ax.set_xlabel(f"share of sampled prefixes kept ({mode} rerun check)")
    ax.set_title("Figure 3c: the paper's prefix funnel and this run's")
    fig.tight_layout()
    return fig


# --- figure 4 and table 2 ------------------------------------------------------------------------------


def shares_beside(run_types: pd.DataFrame | None, reported: dict[str, Any]):
    """Figure 4's two panels, share of error steps and share of environments per type: the paper's
    types (grey; its environment panel prints the top four only), then the run's (`type`, `share`,
    `env_share` columns, as notebook 02's `taxonomy_types.csv`)."""
    import matplotlib.pyplot as plt

    paper = reported["figure4"]["rows"]
    run = run_types if run_types is not None else pd.DataFrame(columns=["type", "share", "env_share"])
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.38 * (len(paper) + len(run)) + 1.6), sharey=True)
    for ax, (paper_col, run_col, label) in zip(axes, [("steps", "share", "share of error steps"),
                                                        ("envs", "env_share", "share of environments")]):
        rows = [(f"paper: {r.type}", float(getattr(r, paper_col)), None, True) for r in paper.itertuples()]
        rows += [(f"run: {r['type']}", float(r[run_col]) if run_col in r else float("nan"), None, False)
                 for _, r in run.iterrows()]
        _bar_panel(ax, rows, label, label.capitalize(), xmax=1.0)
    fig.suptitle("Figure 4: error steps per type, the paper's and this run's")
    fig.tight_layout()
    return fig


def table2_beside(run_table: pd.DataFrame | None, reported: dict[str, Any]) -> pd.DataFrame:
    """Table 2: the paper's misbehaviors (share of error steps and of profiled environments, and the
    union of the eight), then the run's (`mirl.taxonomy.stats.table2`), one table with a `source` column."""
    t = reported["table2"]
    paper = t["rows"].rename(columns={"steps": "share", "envs": "env_share"})[["type", "share", "env_share"]]
    paper = pd.concat([paper, pd.DataFrame([{"type": "union of kept types", "share": t["union"]["steps"],
                                             "env_share": t["union"]["envs"]}])], ignore_index=True)
    paper = paper.assign(source="paper")
    if run_table is None or run_table.empty:
        return paper[["source", "type", "share", "env_share"]]
    run = run_table.assign(source="run")
    cols = ["source", "type", "share", "env_share"]
    return pd.concat([paper, run], ignore_index=True)[cols + [c for c in run.columns if c not in cols]]


# --- figures 5 and 6: scores ---------------------------------------------------------------------------


def scores_beside(run_scores: pd.DataFrame | None, reported: dict[str, Any], labels: dict[str, str] | None = None,
                  figure: str = "figure5", task_set: str = "this run's task set"):
    """Figure 5 (or 6, the ablations): the paper's mean +- SE per recipe on TB-Lite and TB-2.1 (a panel
    each; the TMax paper's published scores marked "reported"), and a third panel with the run's
    policies (notebook 06's `scores.csv`: `policy`, `run_mean`, `run_se`)."""
    import matplotlib.pyplot as plt

    paper = reported[figure]["scores"]
    labels = labels or {}
    run_rows = [] if run_scores is None else [
        (f"run: {labels.get(r['policy'], r['policy'])}", float(r["run_mean"]), 0.0 if pd.isna(r["run_se"]) else float(r["run_se"]), False)
        for _, r in run_scores.iterrows() if not pd.isna(r["run_mean"])]
    n = max(len(paper) // 2, len(run_rows), 1)
    fig, axes = plt.subplots(1, 3, figsize=(15, 0.42 * n + 1.6))
    for ax, b in zip(axes, BENCHMARKS):
        part = paper[paper["benchmark"] == b]
        rows = [(f"{r.recipe}{' (reported)' if r.source == 'reported' else ''}", r.mean, r.se, True) for r in part.itertuples()]
        _bar_panel(ax, rows, "score (mean over runs +- SE)", f"paper: {b}", xmax=1.0)
    if run_rows:
        _bar_panel(axes[2], run_rows, "score (mean over runs +- SE)", f"run: {task_set}", xmax=1.0)
    else:
        axes[2].axis("off")
        axes[2].text(0.5, 0.5, "no scores in this run yet", ha="center", transform=axes[2].transAxes)
    name = "Figure 5: benchmark scores" if figure == "figure5" else "Figure 6: ablations"
    fig.suptitle(f"{name}, the paper's and this run's")
    fig.tight_layout()
    return fig


# --- figure 7: misbehavior rates and their reduction ---------------------------------------------------


def rates_beside(run_rates: pd.DataFrame | None, reported: dict[str, Any], labels: dict[str, str] | None = None):
    """Figure 7: each misbehavior's rate per policy, one panel per judge: the paper's two judges, then
    each judge of the run (notebook 05's `rates.csv`, without its "all" rows)."""
    import matplotlib.pyplot as plt

    labels = labels or {}
    paper = reported["figure7"]["rates"]
    run = pd.DataFrame(columns=["policy", "misbehavior", "judge", "rate"]) if run_rates is None else \
        run_rates[run_rates["misbehavior"] != "all"]
    panels = [(f"paper: {j}", paper[paper["judge"] == j], True) for j in JUDGES]
    panels += [(f"run: {j}", run[run["judge"] == j], False) for j in dict.fromkeys(run["judge"])]
    # one panel under the other: the long row labels share one left margin and every panel the same scale
    sizes = [max(1, len(p)) for _, p, _ in panels]
    top = max([float(p["rate"].max()) for _, p, _ in panels if len(p) and p["rate"].notna().any()] or [0.0])
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 0.26 * sum(sizes) + 1.1 * len(panels) + 0.8), squeeze=False,
                             gridspec_kw={"height_ratios": sizes})
    for ax, (title, part, is_paper) in zip(axes[:, 0], panels):
        rows = [(f"{r.misbehavior[:40]} | {labels.get(r.policy, r.policy)}", float(r.rate), None, is_paper)
                for r in part.itertuples() if r.rate == r.rate]
        _bar_panel(ax, rows, "misbehavior rate", title, xmax=max(0.05, top * 1.15))
        if not rows:
            ax.text(0.5, 0.5, "no rate: no continuation was judged", transform=ax.transAxes, ha="center", va="center",
                    color=PAPER)
    fig.suptitle("Figure 7: misbehavior rates on unseen prefixes, the paper's and this run's")
    fig.tight_layout()
    return fig


MEAN = "mean over misbehaviors"


def reductions(rates: pd.DataFrame, base: str, policy: str) -> pd.DataFrame:
    """Relative reduction of each misbehavior's rate, `policy` against `base`, per judge:
    1 - rate(policy) / rate(base) (undefined where the base rate is 0), and per judge the reduction
    of the mean rate over the misbehaviors both policies were measured on (misbehavior `MEAN`): the
    quantity the paper's 43%-57% is (its Figure 7 rows give 57% under Gemini, 43% under Qwen)."""
    keys = ["judge", "misbehavior"]
    rates = rates[rates["misbehavior"] != "all"]
    b = rates[rates["policy"] == base].set_index(keys)["rate"]
    p = rates[rates["policy"] == policy].set_index(keys)["rate"]
    both = pd.concat({"base_rate": b, "rate": p}, axis=1).dropna()
    means = both.groupby(level="judge").mean().assign(misbehavior=MEAN).set_index("misbehavior", append=True)
    per = both[both["base_rate"] > 0]
    out = pd.concat([per, means[means["base_rate"] > 0]])
    out["reduction"] = 1 - out["rate"] / out["base_rate"]
    return out.reset_index().assign(base=base, policy=policy)


def reductions_against(rates: pd.DataFrame, base: str, labels: dict[str, str] | None = None) -> pd.DataFrame:
    """`reductions` of every other policy of `rates` against `base`, stacked, policies named by `labels`."""
    labels = labels or {}
    frames = [reductions(rates, base, other).assign(policy=labels.get(other, other), base=labels.get(base, base))
              for other in dict.fromkeys(rates["policy"]) if other != base]
    frames = [f for f in frames if not f.empty]
    columns = ["judge", "misbehavior", "base_rate", "rate", "reduction", "base", "policy"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def mean_reductions(reported: dict[str, Any], base: str = "Qwen3.5-4B", policy: str = "MiRL") -> dict[str, float]:
    """Per judge, the reduction of the mean rate that the paper's Figure 7 rows give."""
    red = reductions(reported["figure7"]["rates"], base, policy)
    return dict(zip(red.loc[red["misbehavior"] == MEAN, "judge"], red.loc[red["misbehavior"] == MEAN, "reduction"]))


def reduction_figure(red: pd.DataFrame, reported: dict[str, Any]):
    """One panel per (policy, judge): each misbehavior's relative reduction (horizontal bars, the value
    written beside each, so a 0 is seen as one), then the reduction of the mean rate (the last bar),
    with the paper's range of that mean reduction (43%-57%) as a band behind that bar only: the paper's
    range is of the mean rate, not of each misbehavior's. Without data the panel says what is missing."""
    import textwrap

    import matplotlib.pyplot as plt

    band = reported["figure7"]["mean_reduction"]
    panels = list(dict.fromkeys(zip(red["policy"], red["judge"])))
    n = max([len(red[(red["policy"] == p) & (red["judge"] == j)]) for p, j in panels] or [1])
    cols = max(1, len(dict.fromkeys(j for _, j in panels)))
    rows = max(1, (len(panels) + cols - 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7.5 * cols, (0.42 * n + 1.6) * rows + 0.9), squeeze=False,
                             sharex=True)
    if not panels:
        ax = axes[0][0]
        ax.text(0.5, 0.5, "no reduction to show: no trained policy was judged on held-out prefixes\n"
                          "with a base rate above 0 (the training stage selected no checkpoint, or the\n"
                          "base policy never repeated a misbehavior)", ha="center", va="center",
                transform=ax.transAxes, fontsize=9)
        ax.set_axis_off()
    for ax, (policy, judge) in zip(axes.flat, panels):
        part = red[(red["policy"] == policy) & (red["judge"] == judge)]
        per, mean = part[part["misbehavior"] != MEAN], part[part["misbehavior"] == MEAN]
        y = list(range(len(per)))
        ax.barh(y, per["reduction"], height=0.6, color=RUN, label="run: per misbehavior")
        ym = len(per)
        ax.fill_betweenx([ym - 0.45, ym + 0.45], band["low"], band["high"], color=PAPER, alpha=0.35,
                         label=f"paper: mean rate -{band['low']:.0%} to -{band['high']:.0%}")
        if len(mean):
            ax.barh([ym], mean["reduction"], height=0.45, color="#d9822b", label="run: mean rate")
        for yy, v in zip(y + ([ym] if len(mean) else []), list(per["reduction"]) + list(mean["reduction"])):
            ax.annotate(f"{v:+.0%}", (max(float(v), 0.0), yy), xytext=(3, 0), textcoords="offset points",
                        va="center", fontsize=8)
        ax.axvline(0, color="black", lw=0.8)
        names = [textwrap.shorten(m, 40, placeholder="...") for m in per["misbehavior"]] + ["mean over misbehaviors"]
        ax.set_yticks(range(ym + 1), names, fontsize=8)
        ax.invert_yaxis()
        base = part["base"].iloc[0] if len(part) else ""
        ax.set_title(f"{policy} vs {base}, judge: {judge}", fontsize=10)
        ax.set_xlabel("relative reduction of the misbehavior rate")
    if panels:  # one scale for every panel (they share it): room for the lowest reduction of any
        axes.flat[0].set_xlim(min([-0.1] + [float(v) - 0.1 for v in red["reduction"]]), 1.1)
    for ax in list(axes.flat)[max(1, len(panels)):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle("Figure 7: reduction of the targeted misbehaviors; the paper's range is of the mean rate", fontsize=11)
    fig.tight_layout(rect=(0, 0.06 if handles else 0, 1, 1))
    return fig


def dead_groups_beside(run_dead_share: float | None, recipe: str, reported: dict[str, Any]) -> pd.DataFrame:
    """The share of dead groups (all rewards equal) of the paper's recipes (Figures 6 and 10's text) and
    of this run's recipe (the mean over its steps)."""
    rows = [{"source": "paper", "recipe": k, "dead_share": v} for k, v in reported["figure10"]["dead_groups"].items()]
    rows += [{"source": "paper", "recipe": k, "dead_share": v} for k, v in reported["figure6"]["dead_groups"].items()
             if k != "TMax-189"]
    rows.append({"source": "run", "recipe": recipe, "dead_share": run_dead_share})
    return pd.DataFrame(rows)


# --- figure 8: pass@k and solve counts -------------------------------------------------------------


def _curves(ax, paper: dict[str, dict[int, float]], run: dict[str, dict[int, float]]):
    import seaborn as sns

    greys = sns.color_palette("Greys", len(paper) + 2)[2:]
    for (name, curve), color in zip(paper.items(), greys):
        ax.plot(list(curve), list(curve.values()), linestyle="--", marker="s", color=color, label=f"paper: {name}")
    for (name, curve), color in zip(run.items(), sns.color_palette("colorblind", max(1, len(run)))):
        ax.plot(list(curve), list(curve.values()), marker="o", color=color, label=f"run: {name}")


def _run_curves(df: pd.DataFrame | None, y: str, labels: dict[str, str] | None) -> dict[str, dict[int, float]]:
    labels = labels or {}
    if df is None or df.empty:
        return {}
    return {labels.get(p, p): dict(zip(part["k"].astype(int), part[y].astype(float)))
            for p, part in df.sort_values("k").groupby("policy", sort=False)}


def passk_beside(run_passk: pd.DataFrame | None, reported: dict[str, Any], labels: dict[str, str] | None = None):
    """Figure 8a: pass@k against k, the paper's policies (it prints their values at k = 16 only: one
    marker each) and the run's curves (notebook 06's `passk.csv`: `policy`, `k`, `mean`)."""
    import matplotlib.pyplot as plt

    paper = {r.policy: {int(r.k): float(r.mean)} for r in reported["figure8"]["pass_at_k"].itertuples()}
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    _curves(ax, paper, _run_curves(run_passk, "mean", labels))
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("Figure 8a: pass@k; the paper prints k = 16 only")
    fig.tight_layout()
    return fig


def solved_beside(per_task: pd.DataFrame | None, reported: dict[str, Any], labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Figure 8b: tasks solved at least once and never, the paper's (TB-2.1, 16 runs) and each run policy's
    (notebook 06's `passk_tasks.csv`: `policy`, `task`, `n`, `c`)."""
    f = reported["figure8"]
    rows = [{"source": "paper", "policy": "(not named)", "runs": f.get("runs"), "tasks": f.get("tasks"),
             "solved_at_least_once": f.get("solved_at_least_once"), "never_solved": f.get("never_solved")}]
    labels = labels or {}
    if per_task is not None and not per_task.empty:
        for p, part in per_task.groupby("policy", sort=False):
            rows.append({"source": "run", "policy": labels.get(p, p), "runs": int(part["n"].max()),
                         "tasks": len(part), "solved_at_least_once": int((part["c"] > 0).sum()),
                         "never_solved": int((part["c"] == 0).sum())})
    return pd.DataFrame(rows)


# --- figure 11: score against the number of training environments ------------------------------------


def environments_beside(run_points: pd.DataFrame | None, reported: dict[str, Any], base: pd.DataFrame | None = None):
    """Figure 11: MiRL's score against its number of training environments (log x), TB-Lite and TB-2.1,
    with TMax-4B and Qwen3.5-4B as horizontal lines; the run's trained policies at their environment
    counts (`policy`, `environments`, `mean`, `se`) in a third panel, its base policy (`base`: `policy`,
    `mean`) as a horizontal line there."""
    import matplotlib.pyplot as plt

    f = reported["figure11"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, b in zip(axes, BENCHMARKS):
        pts = f["points"][f["points"]["benchmark"] == b].sort_values("environments")
        ax.errorbar(pts["environments"], pts["mean"], yerr=pts["se"], marker="o", color=PAPER, capsize=3,
                    label="paper: MiRL")
        for r in f["lines"][f["lines"]["benchmark"] == b].itertuples():
            ax.axhline(r.mean, linestyle="--", color="#555555" if r.recipe.startswith("TMax") else "#bbbbbb",
                       label=f"paper: {r.recipe}")
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(list(pts["environments"]), [str(x) for x in pts["environments"]])
        ax.set_title(f"paper: {b}")
        ax.set_xlabel("training environments (log scale)")
        ax.set_ylabel("score (mean over 3 runs +- SE)")
        ax.legend(fontsize=7)
    ax = axes[2]
    if run_points is not None and not run_points.empty:
        pts = run_points.sort_values("environments")
        ax.errorbar(pts["environments"], pts["mean"], yerr=pts["se"].fillna(0), marker="o", color=RUN, capsize=3,
                    linestyle="none", label="run: trained policies")
        for r in pts.itertuples():
            ax.annotate(str(r.policy), (r.environments, r.mean), fontsize=7, xytext=(4, 4), textcoords="offset points")
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(list(pts["environments"]), [str(int(x)) for x in pts["environments"]])
    else:
        ax.text(0.5, 0.5, "no trained policy scored in this run", ha="center", transform=ax.transAxes)
    for r in (base.itertuples() if base is not None else []):
        ax.axhline(r.mean, linestyle="--", color="#bbbbbb", label=f"run: {r.policy}")
    ax.set_title("run")
    ax.set_xlabel("training environments (log scale)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.suptitle("Figure 11: score against the number of training environments")
    fig.tight_layout()
    return fig


# --- figure 12: SE against the number of seeds ----------------------------------------------------


def seed_se_beside(run_curves: pd.DataFrame | None, reported: dict[str, Any], labels: dict[str, str] | None = None):
    """Figure 12a: the score's standard error against the number of seeds, the paper's (with its
    1/sqrt(k) guide through k = 2) and the run's (`mirl.evaluate.report.seed_curves`: `policy`, `k`, `se`)."""
    import matplotlib.pyplot as plt

    se = reported["figure12"]["se"]
    paper = {"mean SE": dict(zip(se["k"].astype(int), se["se"].astype(float)))}
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    _curves(ax, paper, _run_curves(run_curves, "se", labels))
    k0, s0 = int(se["k"].iloc[0]), float(se["se"].iloc[0])
    ks = list(se["k"].astype(int))
    ax.plot(ks, [s0 * (k0 / k) ** 0.5 for k in ks], linestyle=":", color=PAPER, label="paper: ~ 1/sqrt(k)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("seeds k (log scale)")
    ax.set_ylabel("standard error of the score")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("Figure 12a: SE against the number of seeds")
    fig.tight_layout()
    return fig


def seed_scores_beside(run_scores: pd.DataFrame | None, reported: dict[str, Any], labels: dict[str, str] | None = None
                       ) -> pd.DataFrame:
    """Figure 12b: mean +- SE on TB-2.1 over 3 runs and over 16 seeds, the paper's recipes and the run's
    policies (notebook 06's `scores.csv`: the mean over all its runs)."""
    paper = reported["figure12"]["scores"].assign(source="paper")
    labels = labels or {}
    if run_scores is None or run_scores.empty:
        return paper[["source", "recipe", "over", "mean", "se"]]
    run = pd.DataFrame([{"source": "run", "recipe": labels.get(r["policy"], r["policy"]), "over": f"runs_{int(r['n_runs'])}",
                         "mean": r["run_mean"], "se": r["run_se"]} for _, r in run_scores.iterrows()])
    return pd.concat([paper, run], ignore_index=True)[["source", "recipe", "over", "mean", "se"]]


# --- table 4: prices ----------------------------------------------------------------------------------


def prices_beside(prices: dict[str, dict[str, Any]], reported: dict[str, Any]) -> pd.DataFrame:
    """Table 4 (prices per million tokens) beside the price table the run's cost report used."""
    paper = reported["table4"]["prices"].assign(source="paper")
    run = pd.DataFrame([{"source": "run", "model": m, "currency": str(p.get("currency", "USD")),
                         "input": p.get("input"), "cached_input": p.get("cached_input", p.get("input")),
                         "output": p.get("output")} for m, p in prices.items()])
    return pd.concat([paper, run], ignore_index=True)[["source", "model", "role", "currency", "input", "cached_input", "output"]]


# --- what the notebooks save --------------------------------------------------------------------------


def save_taxonomy_beside(run_types: pd.DataFrame, run_table2: pd.DataFrame, reported: dict[str, Any],
                         report_dir) -> pd.DataFrame | str:
    """Notebook 02: Figure 4 (`taxonomy_figure4_paper`) and Table 2 (`taxonomy_table2_paper.csv`) beside
    the paper's, each where the file holds it; the Table 2 frame, or why it is not drawn."""
    from pathlib import Path

    from mirl import plotstyle
    from mirl.reported import absent

    table = None
    if "figure4" in reported:
        plotstyle.save(shares_beside(run_types, reported), report_dir, "taxonomy_figure4_paper")
    if "table2" in reported:
        table = table2_beside(run_table2, reported)
        table.to_csv(Path(report_dir) / "taxonomy_table2_paper.csv", index=False)
    missing = absent(reported, "figure4", "table2")
    if table is None:
        return missing
    if missing:
        print(missing)
    return table


def save_reductions(rates: pd.DataFrame, labels: dict[str, str], reported: dict[str, Any],
                    report_dir) -> pd.DataFrame | str:
    """Notebook 05: each policy's relative reduction of the rates against the first policy named
    (`misbehavior_reductions.csv`) and Figure 7's reduction panel (`misbehavior_reduction`); the table,
    or why there is nothing to compare."""
    from pathlib import Path

    from mirl import plotstyle

    red = reductions_against(rates, next(iter(labels)), labels)
    Path(report_dir).mkdir(parents=True, exist_ok=True)
    red.to_csv(Path(report_dir) / "misbehavior_reductions.csv", index=False)
    if red.empty:
        return "one policy, or no base rate above 0: nothing to compare"
    plotstyle.save(reduction_figure(red, reported), report_dir, "misbehavior_reduction")
    return red
