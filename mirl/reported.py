"""The numbers a paper reports, from one params file (`params/paper_reported.yaml`), drawn beside a run.

    source: where the numbers come from
    figure3c: {sampled: 640, kept: 219}                        # prefixes sampled -> kept by the rerun check
    figure7:  {relative_reduction: {low: 0.43, high: 0.57}}    # targeted misbehavior rates, trained vs base
    figure9:  params/cost/paper_reported.yaml                  # the cost recipes (mirl.cost.paper's format)
    figure4:  {shares: {type: share}}                          # share of error steps per type
    table2:   {rows: [{type: name, share: x, definition: text}]}   # the kept misbehaviors
    figure5:  {scores: {recipe: {mean: x, se: y}}}             # benchmark score per recipe, 0-1
    figure8a: {pass_at_k: {recipe: {k: value}}}                # pass@k curves
    figure12: {se: {k: value}}                                 # SE of the score against the number of seeds
    not_transcribed: {figure11: why, ...}                      # figures whose values the file does not hold

A figure the file holds is redrawn from it and a user's run is drawn beside it; a figure listed under
`not_transcribed` is named as such by the notebooks instead of being drawn from invented values. Bad
input is an error naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from mirl.config import ParamsError, read_yaml

FIGURES = ("figure3c", "figure4", "figure5", "figure7", "figure8a", "figure9", "figure11", "figure12", "table2")
DEFAULT = "params/paper_reported.yaml"


def _number(path: Path, where: str, v: Any, low: float = 0.0, high: float | None = None) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ParamsError(f"{path}: {where} must be a number, got {v!r}") from None
    if x != x:
        raise ParamsError(f"{path}: {where} must be a number, got NaN")
    if x < low or (high is not None and x > high):
        raise ParamsError(f"{path}: {where} = {v!r} is outside [{low}, {high if high is not None else 'inf'}]")
    return x


def _keys(path: Path, where: str, value: Any, need: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) != need:
        got = sorted(value) if isinstance(value, dict) else repr(value)
        raise ParamsError(f"{path}: {where} needs exactly {', '.join(sorted(need))}; got {got}")
    return value


def read(path: str | Path = DEFAULT) -> dict[str, Any]:
    """The reported numbers, checked: {"source", "figure3c", "figure7", "figure9" (the cost file read),
    "not_transcribed"}; a figure absent from both the values and `not_transcribed` is an error."""
    from mirl.cost.paper import find, read_reported

    path = find(path)
    data = read_yaml(path, "file of a paper's reported numbers")
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: must be a mapping with source, figures and not_transcribed")
    unknown = sorted(set(data) - {*FIGURES, "source", "not_transcribed"})
    if unknown:
        raise ParamsError(f"{path}: unknown key(s) {', '.join(unknown)}; known: source, not_transcribed, {', '.join(FIGURES)}")
    missing = data.get("not_transcribed") or {}
    if not isinstance(missing, dict) or not all(isinstance(v, str) and v.strip() for v in missing.values()):
        raise ParamsError(f"{path}: not_transcribed maps figure names to the reason their values are absent")
    both = sorted(set(missing) & set(data))
    if both:
        raise ParamsError(f"{path}: {', '.join(both)} both given and listed as not transcribed")
    silent = [f for f in FIGURES if f not in data and f not in missing]
    if silent:
        raise ParamsError(f"{path}: say for {', '.join(silent)} either its values or why not (not_transcribed)")
    unread = sorted(set(data) & set(FIGURES) - set(DRAWN))
    if unread:
        raise ParamsError(f"{path}: values for {', '.join(unread)} are not drawn by the kit (what the figure shows "
                          "is not described to it); list them under not_transcribed")
    out: dict[str, Any] = {"source": str(data.get("source") or ""), "not_transcribed": dict(missing)}
    if "figure3c" in data:
        f = _keys(path, "figure3c", data["figure3c"], {"sampled", "kept"})
        sampled, kept = _number(path, "figure3c.sampled", f["sampled"], 1), _number(path, "figure3c.kept", f["kept"])
        if kept > sampled:
            raise ParamsError(f"{path}: figure3c.kept ({kept:g}) is more than figure3c.sampled ({sampled:g})")
        out["figure3c"] = {"sampled": sampled, "kept": kept}
    if "figure7" in data:
        f = _keys(path, "figure7", data["figure7"], {"relative_reduction"})
        r = _keys(path, "figure7.relative_reduction", f["relative_reduction"], {"low", "high"})
        low = _number(path, "figure7.relative_reduction.low", r["low"], 0, 1)
        high = _number(path, "figure7.relative_reduction.high", r["high"], low, 1)
        out["figure7"] = {"relative_reduction": {"low": low, "high": high}}
    if "figure9" in data:
        where = data["figure9"]
        if not isinstance(where, str):
            raise ParamsError(f"{path}: figure9 names the file of reported costs (mirl.cost.paper's format)")
        out["figure9"] = read_reported(where)
    if "figure4" in data:
        f = _keys(path, "figure4", data["figure4"], {"shares"})
        out["figure4"] = {"shares": _mapping(path, "figure4.shares", f["shares"], lambda w, v: _number(path, w, v, 0, 1))}
    if "table2" in data:
        out["table2"] = {"rows": _table2_rows(path, _keys(path, "table2", data["table2"], {"rows"})["rows"])}
    if "figure5" in data:
        f = _keys(path, "figure5", data["figure5"], {"scores"})

        def score(where, v):
            v = _keys(path, where, v, {"mean", "se"})
            return {"mean": _number(path, f"{where}.mean", v["mean"], 0, 1), "se": _number(path, f"{where}.se", v["se"])}
        out["figure5"] = {"scores": _mapping(path, "figure5.scores", f["scores"], score)}
    if "figure8a" in data:
        f = _keys(path, "figure8a", data["figure8a"], {"pass_at_k"})
        out["figure8a"] = {"pass_at_k": _mapping(path, "figure8a.pass_at_k", f["pass_at_k"],
                                                 lambda w, v: _curve(path, w, v, high=1))}
    if "figure12" in data:
        out["figure12"] = {"se": _curve(path, "figure12.se", _keys(path, "figure12", data["figure12"], {"se"})["se"])}
    return out


DRAWN = ("figure3c", "figure4", "figure5", "figure7", "figure8a", "figure9", "figure12", "table2")


def _mapping(path: Path, where: str, value: Any, each) -> dict[str, Any]:
    if not isinstance(value, dict) or not value:
        raise ParamsError(f"{path}: {where} must be a non-empty mapping, got {value!r}")
    return {str(k): each(f"{where}.{k}", v) for k, v in value.items()}


def _curve(path: Path, where: str, value: Any, high: float | None = None) -> dict[int, float]:
    """{k: value} with k = 1, 2, ... (integers, in any order)."""
    out = {}
    for k, v in _mapping(path, where, value, lambda w, v: v).items():
        if not k.isdigit() or int(k) < 1:
            raise ParamsError(f"{path}: {where} is keyed by k = 1, 2, ...; got {k!r}")
        out[int(k)] = _number(path, f"{where}.{k}", v, 0, high)
    return dict(sorted(out.items()))


def _table2_rows(path: Path, rows: Any) -> list[dict[str, Any]]:
    if not isinstance(rows, list) or not rows:
        raise ParamsError(f"{path}: table2.rows must be a non-empty list of {{type, share, definition}}")
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not {"type", "share"} <= set(r) or set(r) - {"type", "share", "definition"}:
            raise ParamsError(f"{path}: table2.rows[{i}] needs type and share (and may give definition); got {r!r}")
        out.append({"type": str(r["type"]), "share": _number(path, f"table2.rows[{i}].share", r["share"], 0, 1),
                    "definition": str(r.get("definition") or "")})
    return out


def absent(reported: dict[str, Any], *figures: str) -> str:
    """One line per figure the file does not hold, with the reason it gives (for a notebook to print)."""
    why = reported.get("not_transcribed", {})
    return "\n".join(f"{f}: not drawn from the paper: {why.get(f, 'no values given')}" for f in figures
                     if f not in reported)


# --- figure 3c: the prefix funnel ----------------------------------------------------------------


def funnel_beside(funnel: pd.DataFrame, reported: dict[str, Any], mode: str = "exact"):
    """Share of sampled prefixes kept by the rerun check: the paper's, then the run's (overall and
    per misbehavior), from `mirl.prefixes.report.funnel`'s table."""
    import matplotlib.pyplot as plt

    paper = reported["figure3c"]
    rows = [("paper (all)", paper["kept"] / paper["sampled"], f"{paper['kept']:.0f}/{paper['sampled']:.0f}")]
    for _, r in funnel.iterrows():
        name = "run (all)" if r["misbehavior"] == "all" else f"run: {r['misbehavior']}"
        rows.append((name, r[mode] / r["sampled"] if r["sampled"] else 0.0, f"{r[mode]:.0f}/{r['sampled']:.0f}"))
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.2))
    names, shares, notes = zip(*rows)
    colors = ["#7f7f7f"] + ["#3b6ea8"] * (len(rows) - 1)
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


# --- figure 7: the reduction of misbehavior rates --------------------------------------------------


def reductions(rates: pd.DataFrame, base: str, policy: str) -> pd.DataFrame:
    """Relative reduction of each misbehavior's rate, `policy` against `base`, per judge:
    1 - rate(policy) / rate(base) (undefined where the base rate is 0)."""
    keys = ["judge", "misbehavior"]
    b = rates[rates["policy"] == base].set_index(keys)["rate"]
    p = rates[rates["policy"] == policy].set_index(keys)["rate"]
    both = pd.concat({"base_rate": b, "rate": p}, axis=1).dropna()
    both = both[both["base_rate"] > 0]
    both["reduction"] = 1 - both["rate"] / both["base_rate"]
    return both.reset_index().assign(base=base, policy=policy)


def reduction_figure(red: pd.DataFrame, reported: dict[str, Any]):
    """Each misbehavior's relative reduction (bars, one panel per judge) over the paper's reported
    range (the shaded band)."""
    import matplotlib.pyplot as plt

    band = reported["figure7"]["relative_reduction"]
    judges = list(dict.fromkeys(red["judge"])) or ["(none)"]
    fig, axes = plt.subplots(1, len(judges), figsize=(max(5.0, 0.7 * red["misbehavior"].nunique() + 2) * len(judges), 4),
                             squeeze=False, sharey=True)
    for ax, judge in zip(axes[0], judges):
        part = red[red["judge"] == judge]
        ax.axhspan(band["low"], band["high"], color="#7f7f7f", alpha=0.25,
                   label=f"paper: {band['low']:.0%}-{band['high']:.0%}")
        ax.bar(range(len(part)), part["reduction"], color="#3b6ea8", label=f"{part['policy'].iloc[0]} vs "
               f"{part['base'].iloc[0]}" if len(part) else "run")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(range(len(part)), part["misbehavior"], rotation=30, ha="right")
        ax.set_title(f"judge: {judge}")
        ax.set_ylim(min(-0.1, float(part["reduction"].min()) - 0.05) if len(part) else -0.1, 1.05)
    axes[0][0].set_ylabel("relative reduction of the misbehavior rate")
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle("Figure 7: reduction of the targeted misbehaviors, against the paper's range")
    fig.tight_layout()
    return fig


# --- figures 4 and 5, table 2: the paper's values and the run's, side by side -----------------------


def _paired_bars(rows: list[tuple[str, float, float | None, bool]], xlabel: str, title: str, xmax: float = 1.1):
    """Horizontal bars, one per (label, value, error, is_paper) row: the paper's grey, the run's blue."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 0.42 * len(rows) + 1.3))
    for i, (_, value, err, paper) in enumerate(rows):
        ax.barh(i, value, xerr=err, capsize=3 if err else 0, color="#7f7f7f" if paper else "#3b6ea8")
        ax.text(value + (err or 0) + 0.01, i, f"{value:.3g}", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, xmax)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def shares_beside(run_types: pd.DataFrame | None, reported: dict[str, Any]):
    """Figure 4: each type's share of error steps, the paper's then the run's (`type`, `share` columns,
    as notebook 02's `taxonomy_types.csv`)."""
    rows = [(f"paper: {t}", v, None, True) for t, v in reported["figure4"]["shares"].items()]
    if run_types is not None:
        rows += [(f"run: {r['type']}", float(r["share"]), None, False) for _, r in run_types.iterrows()]
    return _paired_bars(rows, "share of error steps", "Figure 4: error steps per type, the paper's and this run's")


def table2_beside(run_table: pd.DataFrame | None, reported: dict[str, Any]) -> pd.DataFrame:
    """Table 2: the paper's kept misbehaviors and the run's, one table with a `source` column."""
    paper = pd.DataFrame(reported["table2"]["rows"]).assign(source="paper")
    if run_table is None or run_table.empty:
        return paper
    return pd.concat([paper, run_table.assign(source="run")], ignore_index=True)[
        ["source", "type", "share", "definition"] + [c for c in run_table.columns if c not in ("type", "share", "definition")]]


def scores_beside(run_scores: pd.DataFrame | None, reported: dict[str, Any], labels: dict[str, str] | None = None):
    """Figure 5: benchmark score +- SE per recipe, the paper's then the run's policies (notebook 06's
    `scores.csv`: `policy`, `run_mean`, `run_se`: the mean over runs, as the paper reports)."""
    rows = [(f"paper: {r}", v["mean"], v["se"], True) for r, v in reported["figure5"]["scores"].items()]
    if run_scores is not None:
        labels = labels or {}
        rows += [(f"run: {labels.get(r['policy'], r['policy'])}", float(r["run_mean"]),
                  0.0 if pd.isna(r["run_se"]) else float(r["run_se"]), False)
                 for _, r in run_scores.iterrows() if not pd.isna(r["run_mean"])]  # a policy with no score: no bar
    return _paired_bars(rows, "score (mean over runs +- SE)", "Figure 5: benchmark scores, the paper's and this run's")


# --- figures 8a and 12: curves against k -----------------------------------------------------------


def _curves(paper: dict[str, dict[int, float]], run: dict[str, dict[int, float]], xlabel: str, ylabel: str,
            title: str, ylim: tuple[float, float] | None = None):
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(6, 4))
    greys = sns.color_palette("Greys", len(paper) + 2)[2:]
    for (name, curve), color in zip(paper.items(), greys):
        ax.plot(list(curve), list(curve.values()), linestyle="--", marker="s", color=color, label=f"paper: {name}")
    for (name, curve), color in zip(run.items(), sns.color_palette("colorblind", max(1, len(run)))):
        ax.plot(list(curve), list(curve.values()), marker="o", color=color, label=f"run: {name}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ylim:
        ax.set_ylim(*ylim)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def passk_beside(run_passk: pd.DataFrame | None, reported: dict[str, Any], labels: dict[str, str] | None = None):
    """Figure 8a: pass@k against k, the paper's recipes (dashed) and the run's policies (notebook 06's
    `passk.csv`: `policy`, `k`, `mean`)."""
    labels = labels or {}
    run = {} if run_passk is None else {
        labels.get(p, p): dict(zip(part["k"].astype(int), part["mean"].astype(float)))
        for p, part in run_passk.sort_values("k").groupby("policy", sort=False)}
    return _curves(reported["figure8a"]["pass_at_k"], run, "k", "pass@k",
                   "Figure 8a: pass@k, the paper's and this run's", (-0.02, 1.02))


def seed_se_beside(run_curves: pd.DataFrame | None, reported: dict[str, Any], labels: dict[str, str] | None = None):
    """Figure 12: the score's standard error against the number of seeds, the paper's and the run's
    (`mirl.evaluate.report.seed_curves`: `policy`, `k`, `se`)."""
    labels = labels or {}
    run = {} if run_curves is None or run_curves.empty else {
        labels.get(p, p): dict(zip(part["k"].astype(int), part["se"].astype(float)))
        for p, part in run_curves.sort_values("k").groupby("policy", sort=False)}
    return _curves({"SE": reported["figure12"]["se"]}, run, "seeds k", "standard error of the score",
                   "Figure 12: SE against the number of seeds, the paper's and this run's")
