"""The cost numbers a paper reports, read from a params file (`params/cost/paper_reported.yaml`).

    recipes:
      <name>:
        total:   {rollouts, input_tokens, output_tokens, environments, gpu_hours, api_usd, total_usd}
        phases:  {preprocessing: {...}, rl: {...}}      # optional, the same keys
        estimate: {steps, batch, group, dead_share}      # optional: rollouts = S*B*G/(1-d)

Bad input is an error naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mirl.config import ParamsError, read_yaml

RESOURCES = ("rollouts", "input_tokens", "output_tokens", "environments", "gpu_hours", "api_usd", "total_usd")
LABELS = {"rollouts": "Rollouts", "input_tokens": "Input tokens", "output_tokens": "Output tokens",
          "environments": "Environments", "gpu_hours": "GPU hours", "api_usd": "API fee", "total_usd": "Total cost"}


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


def find(path: str | Path) -> Path:
    """`path` as given, else relative to the repository (the bundled params files)."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    bundled = Path(__file__).resolve().parents[2] / p
    return bundled if bundled.exists() else p


def read_reported(path: str | Path) -> dict[str, Any]:
    """{"recipes": {name: {"total": {...}, "phases": {...}, "estimate": {...}}}, plus the file's other keys}."""
    path = find(path)
    data = read_yaml(path, "file of reported costs") or {}
    recipes = data.get("recipes") if isinstance(data, dict) else None
    if not isinstance(recipes, dict) or not recipes:
        raise ParamsError(f"{path}: needs `recipes:`, a mapping of recipe names to their reported costs")
    out = {k: v for k, v in data.items() if k != "recipes"}
    out["recipes"] = {}
    for name, r in recipes.items():
        if not isinstance(r, dict) or "total" not in r:
            raise ParamsError(f"{path}: recipes.{name} must be a mapping with `total:`")
        unknown = sorted(set(r) - {"total", "phases", "estimate"})
        if unknown:
            raise ParamsError(f"{path}: recipes.{name}: unknown key(s) {', '.join(unknown)}; use total, phases, estimate")
        entry = {"total": _amounts(path, f"recipes.{name}.total", r["total"])}
        if "phases" in r:
            if not isinstance(r["phases"], dict):
                raise ParamsError(f"{path}: recipes.{name}.phases must map phase names to amounts")
            entry["phases"] = {ph: _amounts(path, f"recipes.{name}.phases.{ph}", v) for ph, v in r["phases"].items()}
        if "estimate" in r:
            est = r["estimate"]
            need = {"steps", "batch", "group", "dead_share"}
            if not isinstance(est, dict) or set(est) != need:
                raise ParamsError(f"{path}: recipes.{name}.estimate needs exactly {', '.join(sorted(need))}")
            entry["estimate"] = {k: float(v) for k, v in est.items()}
        out["recipes"][name] = entry
    ref = out.get("reference")
    if ref is not None and ref not in out["recipes"]:
        raise ParamsError(f"{path}: reference {ref!r} is none of the recipes ({', '.join(out['recipes'])})")
    return out


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
