"""The numbers a paper prints, from one params file (`params/paper_reported.yaml`), drawn beside a run.

The file holds every number the MiRL paper prints for its figures and tables (3c, 4-12, Tables 2 and
4), each mapping with the `line` of the paper's text it was read from (or `lines`, one per key), in
the paper's units (percent for shares, rates and scores; a score is [mean, standard error]).
`read` checks it (a number without its line, an unknown figure or a malformed value is an error naming
the file and the key) and returns the figures as tables in the kit's units (fractions), which the
functions below draw next to a run's own numbers: the paper's bars grey, the run's in colour.

    figure3c  prefix funnel             notebook 03   funnel_beside
    figure4   error steps per type      notebook 02   shares_beside (two panels: steps, environments)
    table2    the kept misbehaviors     notebook 02   table2_beside
    figure5   benchmark scores          notebook 06   scores_beside
    figure6   ablations                 notebook 06   scores_beside(..., figure="figure6")
    figure7   misbehavior rates         notebook 05   rates_beside, reduction_figure (band: the mean rate)
    figure8   pass@k, solve counts      notebook 06   passk_beside, solved_beside
    figure9   cost vs TMax-4B           notebook 07   (read here, compared in mirl.cost.paper)
    figure10  cost of four recipes      notebook 07   (read here, compared in mirl.cost.paper)
    figure11  score vs environments     notebook 06   environments_beside
    figure12  SE vs seeds, 16 seeds     notebook 06   seed_se_beside, seed_scores_beside
    table4    prices                    notebook 07   prices_beside

A user's file may leave a figure out by listing it under `not_transcribed` with the reason; the
notebooks then print the reason instead of drawing. `printed_numbers` lists every (key, value, line)
so that a script can check each number against the paper's text (`scripts/check_paper_lines.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from mirl.config import ParamsError, read_yaml

FIGURES = ("figure3c", "table2", "figure4", "figure5", "figure6", "figure7", "figure8", "figure9", "figure10",
           "figure11", "figure12", "table4")
DEFAULT = "params/paper_reported.yaml"
BENCHMARKS = ("TB-Lite", "TB-2.1")
JUDGES = ("Gemini", "Qwen")
TEXT_KEYS = {"type", "recipe", "source", "misbehavior", "policy", "model", "role", "currency", "note", "not_printed",
             "reference", "judges", "long_tail"}
LABEL_KEYS = {"rank", "scale", "k"}  # numbers that name a row (a rank, an axis position), not printed values
PAPER, RUN = "#8c8c8c", "#3b6ea8"


def find(path: str | Path) -> Path:
    """`path` as given, else relative to the repository (the bundled params files)."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    bundled = Path(__file__).resolve().parents[1] / p
    return bundled if bundled.exists() else p


# --- checking ----------------------------------------------------------------------------------------


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _numeric(v: Any) -> bool:
    """A number, or a list of numbers (a score [mean, se], an axis)."""
    return _is_number(v) or (isinstance(v, list) and bool(v) and all(_is_number(x) for x in v))


def printed_numbers(data: dict[str, Any], path: str | Path = DEFAULT) -> list[tuple[str, Any, int]]:
    """Every printed number of the file as (dotted key, value, line); a number without a line is an error.

    A mapping's numbers take its `line`, or per key its `lines`; a mapping without either takes the
    `lines` of the mapping it sits in (the cost recipes: `total` beside `lines`)."""
    out: list[tuple[str, Any, int]] = []

    def line_of(where: str, node: dict, key: str, inherited: dict | None) -> int:
        lines = node.get("lines") if isinstance(node.get("lines"), dict) else inherited
        got = node.get("line") if "line" in node else (lines or {}).get(key)
        if not isinstance(got, int) or isinstance(got, bool) or got < 1:
            raise ParamsError(f"{path}: {where}.{key} = {node[key]!r} has no line of the paper's text "
                              f"(give `line:` or `lines: {{{key}: N}}`)")
        return got

    def walk(where: str, node: Any, inherited: dict | None) -> None:
        if isinstance(node, list):
            for i, x in enumerate(node):
                walk(f"{where}[{i}]", x, inherited)
            return
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            if key in ("line", "lines") or key in TEXT_KEYS:
                continue
            if key in LABEL_KEYS and _is_number(value):
                continue
            if _numeric(value):
                out.append((f"{where}.{key}", value, line_of(where, node, key, inherited)))
            else:
                walk(f"{where}.{key}", value, node.get("lines") if isinstance(node.get("lines"), dict) else None)
    for figure in FIGURES:
        if figure in data:
            walk(figure, data[figure], None)
    return out


def _need(path: Path, where: str, node: Any, keys: tuple[str, ...], kind: type = dict) -> Any:
    if not isinstance(node, kind):
        raise ParamsError(f"{path}: {where} must be a {'mapping' if kind is dict else 'list'}, got {node!r:.80}")
    if kind is dict:
        missing = [k for k in keys if k not in node]
        if missing:
            raise ParamsError(f"{path}: {where} needs {', '.join(missing)}")
    return node


def _num(path: Path, where: str, v: Any, low: float | None = 0.0, high: float | None = None) -> float:
    if not _is_number(v) or v != v:
        raise ParamsError(f"{path}: {where} must be a number, got {v!r}")
    if (low is not None and v < low) or (high is not None and v > high):
        raise ParamsError(f"{path}: {where} = {v!r} is outside [{low}, {high if high is not None else 'inf'}]")
    return float(v)


def _pct(path: Path, where: str, v: Any) -> float:
    """A printed percentage as a fraction."""
    return round(_num(path, where, v, 0, 100) / 100, 12)  # 39.3 / 100 is 0.39299999999999996


def _score(path: Path, where: str, v: Any) -> tuple[float, float]:
    """A printed [mean, se] in percent, as fractions."""
    if not (isinstance(v, list) and len(v) == 2):
        raise ParamsError(f"{path}: {where} must be [mean, standard error] in percent, got {v!r}")
    return _pct(path, f"{where}[0]", v[0]), _pct(path, f"{where}[1]", v[1])


def _rows(path: Path, where: str, node: Any) -> list[dict[str, Any]]:
    rows = _need(path, where, node, (), list)
    if not rows or not all(isinstance(r, dict) for r in rows):
        raise ParamsError(f"{path}: {where} must be a non-empty list of mappings")
    return rows


def read(path: str | Path = DEFAULT) -> dict[str, Any]:
    """The paper's numbers, checked, as tables in fractions (module docstring); `not_transcribed` and
    `source` as given. A figure neither given nor excused under `not_transcribed` is an error."""
    path = find(path)
    data = read_yaml(path, "file of a paper's reported numbers")
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: must be a mapping of figure names ({', '.join(FIGURES)}) to their numbers")
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
    printed_numbers(data, path)  # every number has its line
    out: dict[str, Any] = {"source": str(data.get("source") or ""), "not_transcribed": dict(missing), "path": str(path)}
    for figure in FIGURES:
        if figure in data:
            out[figure] = PARSERS[figure](path, figure, data[figure])
    if "figure9" in out and "figure10" in out:
        for name in set(out["figure9"]["recipes"]) & set(out["figure10"]["recipes"]):
            if out["figure9"]["recipes"][name]["total"] != out["figure10"]["recipes"][name]["total"]:
                raise ParamsError(f"{path}: figure10.recipes.{name} reports other totals than an earlier figure (figure9)")
    return out


def _value(path: Path, where: str, node: Any, low: float | None = 0.0) -> float:
    return _num(path, f"{where}.value", _need(path, where, node, ("value",))["value"], low)


def _figure3c(path: Path, where: str, f: Any) -> dict[str, float]:
    _need(path, where, f, ("sampled", "kept"))
    sampled, kept = _value(path, f"{where}.sampled", f["sampled"]), _value(path, f"{where}.kept", f["kept"])
    if kept > sampled or sampled < 1:
        raise ParamsError(f"{path}: {where}.kept ({kept:g}) is more than {where}.sampled ({sampled:g})")
    out = {"sampled": sampled, "kept": kept}
    if "environments" in f:
        out["environments"] = _value(path, f"{where}.environments", f["environments"])
    return out


def _type_rows(path: Path, where: str, rows: Any, envs_needed: bool) -> pd.DataFrame:
    out = []
    for i, r in enumerate(_rows(path, f"{where}.rows", rows)):
        w = f"{where}.rows[{i}]"
        _need(path, w, r, ("type", "steps") + (("envs",) if envs_needed else ()))
        out.append({"rank": int(r.get("rank", i + 1)), "type": str(r["type"]), "steps": _pct(path, f"{w}.steps", r["steps"]),
                    "envs": _pct(path, f"{w}.envs", r["envs"]) if "envs" in r else float("nan")})
    return pd.DataFrame(out, columns=["rank", "type", "steps", "envs"])


def _table2(path: Path, where: str, f: Any) -> dict[str, Any]:
    _need(path, where, f, ("rows", "union"))
    union = _need(path, f"{where}.union", f["union"], ("steps", "envs"))
    out = {"rows": _type_rows(path, where, f["rows"], True),
           "union": {"steps": _pct(path, f"{where}.union.steps", union["steps"]),
                     "envs": _pct(path, f"{where}.union.envs", union["envs"])}}
    for k in ("error_steps", "environments"):
        if k in f:
            out[k] = _value(path, f"{where}.{k}", f[k])
    return out


def _figure4(path: Path, where: str, f: Any) -> dict[str, Any]:
    _need(path, where, f, ("rows",))
    out: dict[str, Any] = {"rows": _type_rows(path, where, f["rows"], False)}
    if "top8" in f:
        top = _need(path, f"{where}.top8", f["top8"], ("steps", "envs"))
        out["top8"] = {"steps": _pct(path, f"{where}.top8.steps", top["steps"]),
                       "envs": _pct(path, f"{where}.top8.envs", top["envs"])}
    return out


def _scores(path: Path, where: str, rows: Any, name: str) -> pd.DataFrame:
    out = []
    for i, r in enumerate(_rows(path, where, rows)):
        w = f"{where}[{i}]"
        _need(path, w, r, (name,))
        for b in BENCHMARKS:
            if b in r:
                mean, se = _score(path, f"{w}.{b}", r[b])
                out.append({"recipe": str(r[name]), "source": str(r.get("source", "ours")), "benchmark": b,
                            "mean": mean, "se": se})
    return pd.DataFrame(out, columns=["recipe", "source", "benchmark", "mean", "se"])


def _figure5(path: Path, where: str, f: Any) -> dict[str, Any]:
    return {"scores": _scores(path, f"{where}.rows", _need(path, where, f, ("rows",))["rows"], "recipe")}


def _figure6(path: Path, where: str, f: Any) -> dict[str, Any]:
    out = _figure5(path, where, f)
    out["dead_groups"] = {str(k): _pct(path, f"{where}.dead_groups.{k}", _need(path, f"{where}.dead_groups.{k}", v, ("value",))["value"])
                          for k, v in (f.get("dead_groups") or {}).items()}
    return out


def _figure7(path: Path, where: str, f: Any) -> dict[str, Any]:
    _need(path, where, f, ("rows", "mean_reduction"))
    out = []
    for i, r in enumerate(_rows(path, f"{where}.rows", f["rows"])):
        w = f"{where}.rows[{i}]"
        _need(path, w, r, ("misbehavior", "policy", *JUDGES))
        out += [{"misbehavior": str(r["misbehavior"]), "policy": str(r["policy"]), "judge": j,
                 "rate": _pct(path, f"{w}.{j}", r[j])} for j in JUDGES]
    band = _need(path, f"{where}.mean_reduction", f["mean_reduction"], ("low", "high"))
    low = _pct(path, f"{where}.mean_reduction.low", band["low"])
    high = _pct(path, f"{where}.mean_reduction.high", band["high"])
    if high < low:
        raise ParamsError(f"{path}: {where}.mean_reduction.high ({band['high']}) is below its low ({band['low']})")
    return {"rates": pd.DataFrame(out, columns=["misbehavior", "policy", "judge", "rate"]),
            "mean_reduction": {"low": low, "high": high}}


def _figure8(path: Path, where: str, f: Any) -> dict[str, Any]:
    _need(path, where, f, ("pass_at_16",))
    ends = {str(k): _pct(path, f"{where}.pass_at_16.{k}", _need(path, f"{where}.pass_at_16.{k}", v, ("value",))["value"])
            for k, v in _need(path, f"{where}.pass_at_16", f["pass_at_16"], ()).items()}
    out: dict[str, Any] = {"pass_at_k": pd.DataFrame([{"policy": p, "k": 16, "mean": v} for p, v in ends.items()],
                                                     columns=["policy", "k", "mean"])}
    for k in ("runs", "tasks", "solved_at_least_once", "never_solved", "base_catches_up_at_k"):
        if k in f:
            out[k] = _value(path, f"{where}.{k}", f[k])
    return out


def _values(path: Path, where: str, node: Any) -> dict[str, Any]:
    """{key: number} of a mapping of printed `{value, line}` entries (or of `{step, of, line}`: its step)."""
    out = {}
    for k, v in (node or {}).items():
        got = v.get("value", v.get("step")) if isinstance(v, dict) else None
        out[str(k)] = _num(path, f"{where}.{k}", got, None)
    return out


# --- the cost recipes of Figures 9 and 10 (`mirl.cost.paper` compares runs with them) ---------------

RESOURCES = ("rollouts", "input_tokens", "output_tokens", "environments", "gpu_hours", "api_usd", "total_usd")


def _amounts(path: Path, where: str, values: Any) -> dict[str, float]:
    if not isinstance(values, dict):
        raise ParamsError(f"{path}: {where} must be a mapping of {', '.join(RESOURCES)}, got {values!r}")
    unknown = sorted(set(values) - set(RESOURCES))
    if unknown:
        raise ParamsError(f"{path}: {where}: unknown resource(s) {', '.join(unknown)}; known: {', '.join(RESOURCES)}")
    out = {}
    for k, v in values.items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            raise ParamsError(f"{path}: {where}.{k} must be a number, got {v!r}") from None
    return out


def parse_recipes(path: Path, where: str, recipes: Any) -> dict[str, dict[str, Any]]:
    """{name: {"total": {...}, "phases"?: {...}, "estimate"?: {...}}} from a `recipes:` mapping; each
    recipe may carry `lines` (where the paper prints its numbers), which is not an amount."""
    if not isinstance(recipes, dict) or not recipes:
        raise ParamsError(f"{path}: needs `{where}:`, a mapping of recipe names to their reported costs")
    out = {}
    for name, r in recipes.items():
        if not isinstance(r, dict) or "total" not in r:
            raise ParamsError(f"{path}: {where}.{name} must be a mapping with `total:`")
        unknown = sorted(set(r) - {"total", "phases", "estimate", "lines"})
        if unknown:
            raise ParamsError(f"{path}: {where}.{name}: unknown key(s) {', '.join(unknown)}; use total, phases, "
                              "estimate, lines")
        entry: dict[str, Any] = {"total": _amounts(path, f"{where}.{name}.total", r["total"])}
        if "phases" in r:
            if not isinstance(r["phases"], dict):
                raise ParamsError(f"{path}: {where}.{name}.phases must map phase names to amounts")
            entry["phases"] = {ph: _amounts(path, f"{where}.{name}.phases.{ph}", v) for ph, v in r["phases"].items()}
        if "estimate" in r:
            entry["estimate"] = parse_estimate(path, f"{where}.{name}.estimate", r["estimate"])
        out[str(name)] = entry
    return out


def parse_estimate(path: Path, where: str, est: Any) -> dict[str, float]:
    """{steps, batch, group, dead_share} as numbers (a printed `{value, line}` is read as its value;
    a dead share above 1 is a percentage)."""
    need = {"steps", "batch", "group", "dead_share"}
    if not isinstance(est, dict) or not need <= set(est):
        raise ParamsError(f"{path}: {where} needs {', '.join(sorted(need))}")
    out = {}
    for k in sorted(need):
        v = est[k]["value"] if isinstance(est[k], dict) and "value" in est[k] else est[k]
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            raise ParamsError(f"{path}: {where}.{k} must be a number, got {v!r}") from None
    if out["dead_share"] >= 1:
        out["dead_share"] /= 100
    return out


def _costs(path: Path, where: str, f: Any) -> dict[str, Any]:
    """The recipes (mirl.cost.paper's format) and the printed numbers the paper's arithmetic uses:
    Figure 9's percentages and Appendix C's estimate, Figure 10's dead-group shares (as fractions), best
    checkpoints and Table 1 inputs."""
    _need(path, where, f, ("recipes",))
    out: dict[str, Any] = {"recipes": parse_recipes(path, f"{where}.recipes", f["recipes"])}
    if "reference" in f:
        out["reference"] = str(f["reference"])
    for key in ("change_percent", "share_percent", "estimate", "inputs", "dead_groups", "best_checkpoint"):
        if key in f:
            out[key] = _values(path, f"{where}.{key}", f[key])
    for name in out.get("dead_groups", {}):  # printed in percent: fractions, as everywhere in the kit
        out["dead_groups"][name] = round(out["dead_groups"][name] / 100, 12)
    if "dead_share" in out.get("estimate", {}):
        out["estimate"]["dead_share"] = round(out["estimate"]["dead_share"] / 100, 12)
    return out


def _figure11(path: Path, where: str, f: Any) -> dict[str, Any]:
    _need(path, where, f, ("points", "lines_of"))
    points = []
    for i, r in enumerate(_rows(path, f"{where}.points", f["points"])):
        w = f"{where}.points[{i}]"
        _need(path, w, r, ("environments",))
        for b in BENCHMARKS:
            if b in r:
                mean, se = _score(path, f"{w}.{b}", r[b])
                points.append({"environments": int(_num(path, f"{w}.environments", r["environments"], 1)),
                               "benchmark": b, "mean": mean, "se": se})
    lines = []
    for name, r in _need(path, f"{where}.lines_of", f["lines_of"], ()).items():
        for b in BENCHMARKS:
            if b in r:
                mean, se = _score(path, f"{where}.lines_of.{name}.{b}", r[b])
                lines.append({"recipe": str(name), "benchmark": b, "mean": mean, "se": se})
    return {"points": pd.DataFrame(points, columns=["environments", "benchmark", "mean", "se"]),
            "lines": pd.DataFrame(lines, columns=["recipe", "benchmark", "mean", "se"])}


def _figure12(path: Path, where: str, f: Any) -> dict[str, Any]:
    _need(path, where, f, ("se_vs_seeds",))
    se = []
    for i, r in enumerate(_rows(path, f"{where}.se_vs_seeds", f["se_vs_seeds"])):
        w = f"{where}.se_vs_seeds[{i}]"
        _need(path, w, r, ("k", "se"))
        k = r["k"]
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ParamsError(f"{path}: {w}.k is a number of seeds (1, 2, ...); got {k!r}")
        se.append({"k": k, "se": _pct(path, f"{w}.se", r["se"])})
    scores = []
    for i, r in enumerate(f.get("scores") or []):
        w = f"{where}.scores[{i}]"
        _need(path, w, r, ("recipe",))
        for col in ("runs_3", "seeds_16"):
            if col in r:
                mean, s = _score(path, f"{w}.{col}", r[col])
                scores.append({"recipe": str(r["recipe"]), "over": col, "mean": mean, "se": s})
    return {"se": pd.DataFrame(se, columns=["k", "se"]).sort_values("k", ignore_index=True),
            "scores": pd.DataFrame(scores, columns=["recipe", "over", "mean", "se"])}


def _table4(path: Path, where: str, f: Any) -> dict[str, Any]:
    rows = []
    for i, r in enumerate(_rows(path, f"{where}.rows", _need(path, where, f, ("rows",))["rows"])):
        w = f"{where}.rows[{i}]"
        _need(path, w, r, ("model", "currency", "input", "cached_input", "output"))
        rows.append({"model": str(r["model"]), "role": str(r.get("role", "")), "currency": str(r["currency"]),
                     **{k: _num(path, f"{w}.{k}", r[k]) for k in ("input", "cached_input", "output")}})
    return {"prices": pd.DataFrame(rows, columns=["model", "role", "currency", "input", "cached_input", "output"])}


PARSERS = {"figure3c": _figure3c, "table2": _table2, "figure4": _figure4, "figure5": _figure5, "figure6": _figure6,
           "figure7": _figure7, "figure8": _figure8, "figure9": _costs, "figure10": _costs, "figure11": _figure11,
           "figure12": _figure12, "table4": _table4}


def absent(reported: dict[str, Any], *figures: str) -> str:
    """One line per figure the file does not hold, with the reason it gives (for a notebook to print)."""
    why = reported.get("not_transcribed", {})
    return "\n".join(f"{f}: not drawn from the paper: {why.get(f, 'no values given')}" for f in figures
                     if f not in reported)


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
    ax.set_xlim(0, xmax if xmax is not None else max(0.05, top * 1.2))
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
    height = max(len(p) for _, p, _ in panels)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 0.32 * height + 1.8), squeeze=False)
    for ax, (title, part, is_paper) in zip(axes[0], panels):
        rows = [(f"{r.misbehavior[:34]} | {labels.get(r.policy, r.policy)}", float(r.rate), None, is_paper)
                for r in part.itertuples() if r.rate == r.rate]
        _bar_panel(ax, rows, "misbehavior rate", title)
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
