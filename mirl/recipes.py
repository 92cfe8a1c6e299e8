"""Training recipes of one run: several trainings that share stages 01-03, compared by stages 05-07.

A params file lists them beside its sections::

    base: base.yaml
    recipes: [mirl.yaml, outcome-prefix.yaml, tmax.yaml]   # relative to this file

Each recipe is a params file (usually `base:` the same file) that changes only `training.*`; it is
named by its `training.recipe`. `mirl batch` then runs the training notebook once per recipe, each
in its own run directory under the run's, `runs/<run>/recipes/<recipe>/`, where the shared stages'
directories are links to the run's own (so the training stage reads and digests the one copy), and
reports go to `reports/<run>/recipes/<recipe>/`. The batch writes the recipes' names, in order, to
`runs/<run>/recipes.json`; the evaluation stages read every listed recipe's selected checkpoint
(`selected` then means one policy per recipe, named by the recipe) and the cost stage counts each
listed recipe's run beside the run's own.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirl.runner.layout import RECIPES as DIR
from mirl.typed import ParamsError, read_yaml

KEY = "recipes"
SHARED_STAGES = ("profiling", "taxonomy", "prefixes")  # what every recipe reads from the run's own
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
RESERVED = ("base", "selected")  # the evaluation stages' policy words


@dataclass(frozen=True)
class Recipe:
    name: str          # its training.recipe: the policy's name in evaluations, its directory name
    params_file: Path  # the recipe's params file (absolute)


def listed(params_file: str | Path | None, _seen: tuple[Path, ...] = ()) -> list[Path]:
    """The recipe files a params file lists (`recipes:`, relative to the file that lists them; a file
    without the key inherits its `base:` file's list); [] when none in the chain lists any."""
    if params_file is None or str(params_file) == "":
        return []
    path = Path(params_file)
    data = read_yaml(path) or {}
    if not isinstance(data, dict):
        return []  # params.read_file names the problem
    value = data.get(KEY)
    if value is None:
        from mirl.params import base_file

        base = data.get("base")
        where = None if base is None else base_file(path, base)
        return [] if where is None or where in _seen else listed(where, (*_seen, path.resolve()))
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise ParamsError(f"{path}: {KEY} must be a non-empty list of params files (relative to it), got {value!r}")
    files = [(path.parent / v).resolve() for v in value]
    for given, f in zip(value, files):
        if not f.is_file():
            raise ParamsError(f"{path}: recipe {given!r}: no such params file ({f})")
        if f == path.resolve():
            raise ParamsError(f"{path}: recipe {given!r} is this file itself")
    return files


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _differences(a.get(k), b.get(k), f"{where}.{k}" if where else k)]
    return [] if a == b else [where]


def load(params_file: str | Path | None, overrides: dict[str, Any] | None = None) -> list[Recipe]:
    """The recipes of a params file, checked: each loads (with the same overrides), differs from the
    listing file only under `training`, and has its own name. [] when the file lists none."""
    from mirl import params as pipeline

    files = listed(params_file)
    if not files:
        return []
    main = dataclasses.asdict(pipeline.load(params_file, dict(overrides or {})))
    out: list[Recipe] = []
    seen: dict[str, Path] = {}
    for f in files:
        values = pipeline.read_file(f)
        if KEY in (read_yaml(f) or {}):
            raise ParamsError(f"{f}: a recipe cannot list recipes itself")
        p = dataclasses.asdict(pipeline.from_values(pipeline.apply_overrides(values, dict(overrides or {})), str(f)))
        other = _differences({k: v for k, v in main.items() if k != "training"},
                             {k: v for k, v in p.items() if k != "training"})
        if other:
            raise ParamsError(f"{f}: a recipe may change only training.*, but it changes {', '.join(other[:5])}"
                              f"{' ...' if len(other) > 5 else ''} (against {params_file})")
        name = p["training"]["recipe"]
        if name in RESERVED:
            raise ParamsError(f"{f}: training.recipe {name!r} is a policy word of the evaluation stages; name the "
                              "recipe otherwise")
        if not NAME.match(name):
            raise ParamsError(f"{f}: training.recipe {name!r} must be a plain name (letters, digits, . _ -): it "
                              "names the recipe's directory")
        if name in seen:
            raise ParamsError(f"{f}: training.recipe {name!r} is also the name of {seen[name]}; each recipe needs "
                              "its own")
        seen[name] = f
        out.append(Recipe(name, f))
    return out


def run_name(run: str, recipe: str) -> str:
    """The recipe's run name under the runs root (and its reports under the reports root)."""
    return f"{run}/{DIR}/{recipe}"


def link_shared(run_dir: str | Path, recipe: str) -> Path:
    """Make the recipe's run directory, its shared stages links to the run's own; returns it."""
    run_dir = Path(run_dir)
    where = run_dir / DIR / recipe
    where.mkdir(parents=True, exist_ok=True)
    for stage in SHARED_STAGES:
        link, target = where / stage, os.path.join("..", "..", stage)
        if link.is_symlink():
            if os.readlink(link) == target:
                continue
            link.unlink()
        elif link.exists():
            raise ParamsError(f"{link}: a {'directory' if link.is_dir() else 'file'} of its own, where the recipe "
                              f"expects a link to the run's {stage} stage; move it away")
        link.symlink_to(target, target_is_directory=True)
    return where


def prepare(run_dir: str | Path, recipes: list[Recipe]) -> None:
    """Before a batch runs anything: every recipe's directory and links made (a conflict fails here,
    not after the earlier stages ran), and `recipes.json` written from the params (removed without
    recipes), which is how the later stages know the recipes and their order."""
    from mirl.runner.layout import RECIPES_FILE, atomic_write_json

    run_dir = Path(run_dir)
    for r in recipes:
        link_shared(run_dir, r.name)
    if recipes:
        atomic_write_json(run_dir / RECIPES_FILE, [r.name for r in recipes])
    else:
        (run_dir / RECIPES_FILE).unlink(missing_ok=True)
