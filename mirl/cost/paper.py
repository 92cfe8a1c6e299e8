"""The cost numbers a paper reports: the recipes of `params/paper_reported.yaml` (Figures 9 and 10), or a cost file.

    recipes:
      <name>:
        total:   {rollouts, input_tokens, output_tokens, environments, gpu_hours, api_usd, total_usd}
        phases:  {preprocessing: {...}, rl: {...}}      # optional, the same keys
        estimate: {steps, batch, group, dead_share}      # optional: rollouts = S*B*G/(1-d)
        lines:   {resource: line}                        # optional: where the paper prints each number

Bad input is an error naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mirl.config import ParamsError, read_yaml
from mirl.reported import parse_estimate, parse_recipes

LABELS = {"rollouts": "Rollouts", "input_tokens": "Input tokens", "output_tokens": "Output tokens",
          "environments": "Environments", "gpu_hours": "GPU hours", "api_usd": "API fee", "total_usd": "Total cost"}


def find(path: str | Path) -> Path:
    """`path` as given, else relative to the repository (the bundled params files)."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    bundled = Path(__file__).resolve().parents[2] / p
    return bundled if bundled.exists() else p


def read_reported(path: str | Path) -> dict[str, Any]:
    """{"recipes": {name: {"total": {...}, "phases": {...}, "estimate": {...}}}, plus the file's other keys}.

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
