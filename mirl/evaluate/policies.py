"""The policies an evaluation compares: names as the params give them, resolved to model names,
each with the LLM settings it samples under.

`base` is the params file's `models.policy.model`; `selected` the training stage's selected
checkpoint (`training/selection.json`, best first), served in-process as `local/<checkpoint dir>`;
in a run with training recipes (`mirl.recipes`), `selected` is every recipe's selected checkpoint,
each a policy named by its recipe;
anything else is a model name as the `models` section takes it. A `local/<dir>` name must point at
a Hugging Face checkpoint directory (a `config.json` in it).
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

from mirl.runner.inputs import RESUME_STATE
from mirl.runner.layout import RunDir
from mirl.runner.stage import StageError, stage_budgets

log = logging.getLogger(__name__)

BASE, SELECTED = "base", "selected"


def selected_checkpoint(run: RunDir) -> Path | None:
    """The training stage's selected checkpoint directory (validation's pick when it ran), or None
    when training selected none."""
    from mirl.runner.inputs import TRAINING, checkpoint_dir, selected_step

    path, step = selected_step(run)
    if step is None:
        return None
    where = checkpoint_dir(run.stage_dir(TRAINING) / "checkpoints", step)
    if not (where / "config.json").is_file():
        raise StageError(f"{path}: selects step {step}, but {where} holds no checkpoint (no config.json)")
    return where


def resolve(name: str, run: RunDir, params: Any) -> str | None:
    """The model name behind a policy name; None for `selected` when there is no selection."""
    if not isinstance(name, str) or not name.strip():
        raise StageError(f"policy names must be non-empty strings, got {name!r}")
    name = name.strip()
    if name == BASE:
        return params.models.policy.model
    if name == SELECTED:
        where = selected_checkpoint(run)
        return None if where is None else f"local/{where}"
    if name.startswith("local/"):
        rest = name.split("/", 1)[1]
        looks_like_path = "/" in rest or Path(rest).exists()
        if looks_like_path and not (Path(rest) / "config.json").is_file():
            raise StageError(f"policy {name!r}: {rest} is not a Hugging Face checkpoint directory (no config.json)")
    return name


def resolve_all(names: list[str], run: RunDir, params: Any) -> dict[str, str]:
    """policy name -> model name, in the given order; `selected` without a selection is left out."""
    if not names:
        raise StageError("no policies to evaluate (give at least one name)")
    if len(set(names)) != len(names):
        raise StageError(f"policies name one twice: {names}")
    out = {}
    for name in names:
        recipes = run.recipes() if name.strip() == SELECTED else {}
        for recipe, where in recipes.items():
            if recipe in names:
                raise StageError(f"policy {recipe!r} is named in the policies and is a training recipe of this run")
            ckpt = selected_checkpoint(where)
            if ckpt is None:
                log.warning("policy %s: recipe %s has no selected checkpoint (%s); left out", name, recipe, where.root)
            else:
                out[recipe] = f"local/{ckpt}"
        model = None if recipes else resolve(name, run, params)
        if model is not None:
            out[name] = model
    if not out:
        raise StageError(f"none of the policies {names} resolves to a model (no training selection for `selected`)")
    return out


def weights_id(model: str) -> str | None:
    """What a checkpoint's weights are, cheaply: the names, sizes and modification times of its weight
    files, for a `local/<checkpoint dir>` model (None for any other). A recipe trained again to the same
    step writes the same directory anew: its records then no longer match and are played again."""
    import hashlib

    if not model.startswith("local/"):
        return None
    where = Path(model.split("/", 1)[1])
    if not (where / "config.json").is_file():
        return None
    files = sorted(p for pat in ("*.safetensors", "*.bin", "*.pt") for p in where.glob(pat)
                   if p.name not in RESUME_STATE)  # dropped from a checkpoint once a newer one is saved
    # whole seconds: what tar and `cp -a` keep of a modification time, so a copied run keeps its records
    stats = [(p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in files]
    return hashlib.sha256(repr(stats).encode()).hexdigest()[:16]


def stale(record: dict[str, Any], model: str, weights: str | None) -> bool:
    """Whether an evaluation record was made by another model than `model` (whose `weights_id` is
    `weights`). A checkpoint is known by its weights, not its path: a run directory copied or unpacked
    elsewhere names its checkpoints by other paths, and its records stay valid."""
    if weights is not None:
        return record.get("weights") != weights
    return record.get("model") != model


def policy_config(params: Any, model: str, temperature: float | None = None, top_p: float | None = None):
    """The `models` section with the policy role set to `model` (and its sampling, where given)."""
    cfg = copy.deepcopy(params.models)
    cfg.policy.model = model
    if temperature is not None:
        cfg.policy.temperature = temperature
    if top_p is not None:
        cfg.policy.top_p = top_p
    cfg.stage_budget_usd = stage_budgets(params)
    return cfg


def short_name(policy: str, model: str) -> str:
    """A label for plots: the policy word and, for a checkpoint, its directory name."""
    if model.startswith("local/") and "/" in model.split("/", 1)[1]:
        tail = Path(model.split("/", 1)[1]).name
        return tail if policy == model else f"{policy} ({tail})"
    return policy if policy == model else f"{policy} ({model})"
