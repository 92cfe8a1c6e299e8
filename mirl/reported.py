"""The numbers a paper prints, from one params file (`params/paper_reported.yaml`).

The file holds every number the MiRL paper prints for its figures and tables (3c, 4-12, Tables 2 and
4), each mapping with the `line` of the paper's text it was read from (or `lines`, one per key), in
the paper's units (percent for shares, rates and scores; a score is [mean, standard error]).
`read` checks it (a number without its line, an unknown figure or a malformed value is an error naming
the file and the key) and returns the figures as tables in the kit's units (fractions), which
`mirl.paper_figures` draws next to a run's own numbers: the paper's bars grey, the run's in colour.
`read_costs` reads the cost recipes of Figures 9 and 10 (or a user's cost file) for notebook 07.

A user's file may leave a figure out by listing it under `not_transcribed` with the reason; the
notebooks then print the reason instead of drawing. `printed_numbers` lists every (key, value, line)
so that a script can check each number against the paper's text (`scripts/check_paper_lines.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from mirl.typed import ParamsError, read_yaml

FIGURES = ("figure3c", "table2", "figure4", "figure5", "figure6", "figure7", "figure8", "figure9", "figure10",
           "figure11", "figure12", "table4")
DEFAULT = "params/paper_reported.yaml"
BENCHMARKS = ("TB-Lite", "TB-2.1")
JUDGES = ("Gemini", "Qwen")
TEXT_KEYS = {"type", "recipe", "source", "misbehavior", "policy", "model", "role", "currency", "note", "not_printed",
             "reference", "judges", "long_tail"}
LABEL_KEYS = {"rank", "scale", "k"}  # numbers that name a row (a rank, an axis position), not printed values


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


# --- the cost recipes of Figures 9 and 10 (`read_costs`; `mirl.cost.compare` sets runs beside them) ---------------

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
    """The recipes (`read_costs`' format) and the printed numbers the paper's arithmetic uses:
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


# --- cost numbers for notebook 07 ---------------------------------------------------------------------


def read_costs(path: str | Path) -> dict[str, Any]:
    """{"recipes": {name: {"total": {...}, "phases": {...}, "estimate": {...}}}, plus the file's other keys}:
    the cost numbers of a cost file or of the paper's file, for notebook 07.

    A cost file:

        recipes:
          <name>:
            total:   {rollouts, input_tokens, output_tokens, environments, gpu_hours, api_usd, total_usd}
            phases:  {preprocessing: {...}, rl: {...}}      # optional, the same keys
            estimate: {steps, batch, group, dead_share}      # optional: rollouts = S*B*G/(1-d)
            lines:   {resource: line}                        # optional: where the paper prints each number


    Reads a cost file (`recipes:` at the top) or the paper's numbers file (`params/paper_reported.yaml`),
    whose Figure 9 and Figure 10 recipes are merged (a recipe in both must report the same totals) and
    whose Appendix C estimate belongs to Figure 9's reference recipe."""
    path = find(path)
    data = read_yaml(path, "file of reported costs") or {}
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: needs `recipes:`, a mapping of recipe names to their reported costs")
    if "recipes" not in data and ("figure9" in data or "figure10" in data):
        return _from_paper_file(path, data)
    out = {k: v for k, v in data.items() if k != "recipes"}
    out["recipes"] = parse_recipes(path, "recipes", data.get("recipes"))
    ref = out.get("reference")
    if ref is not None and ref not in out["recipes"]:
        raise ParamsError(f"{path}: reference {ref!r} is none of the recipes ({', '.join(out['recipes'])})")
    return out


def _from_paper_file(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    recipes: dict[str, dict[str, Any]] = {}
    out: dict[str, Any] = {"source": str(data.get("source") or ""), "up_to": "best checkpoint", "gpu": "A100"}
    for figure in ("figure9", "figure10"):
        f = data.get(figure)
        if not isinstance(f, dict):
            continue
        for name, entry in parse_recipes(path, f"{figure}.recipes", f.get("recipes")).items():
            if name in recipes and recipes[name]["total"] != entry["total"]:
                raise ParamsError(f"{path}: {figure}.recipes.{name} reports other totals than an earlier figure")
            recipes.setdefault(name, entry)
        if figure == "figure9":
            out["reference"] = str(f.get("reference") or next(iter(recipes)))
            if "estimate" in f:
                recipes[out["reference"]]["estimate"] = parse_estimate(path, f"{figure}.estimate", f["estimate"])
    if not recipes:
        raise ParamsError(f"{path}: figure9/figure10 hold no recipes")
    out["recipes"] = recipes
    out["figures"] = {fig: list((data.get(fig) or {}).get("recipes") or {}) for fig in ("figure9", "figure10")}
    return out


def figure_frame(reported: dict[str, Any], figure: str):
    """`reported_frame` of the recipes one figure shows (Figure 9: MiRL and TMax-4B; Figure 10: the four
    recipes on 189 environments), for a file that says which (`figures`); else of every recipe."""
    names = (reported.get("figures") or {}).get(figure)
    frame = reported_frame(reported)
    return frame[frame["recipe"].isin(names)] if names else frame


def reported_frame(reported: dict[str, Any]):
    """The long comparison frame (recipe, phase, resource, value, source="paper") of reported numbers;
    a recipe without a phase split has one phase, `total`."""
    import pandas as pd

    rows = []
    for name, r in reported["recipes"].items():
        parts = r.get("phases") or {"total": r["total"]}
        for phase, amounts in parts.items():
            rows += [{"recipe": name, "phase": phase, "resource": k, "value": v, "source": "paper"}
                     for k, v in amounts.items()]
    return pd.DataFrame(rows, columns=["recipe", "phase", "resource", "value", "source"])
