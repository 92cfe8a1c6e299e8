"""Runs remember what made them: the params that affect a stage's results, stored with its outputs.

A stage lists the values its results depend on (models and sampling, task pool, limits, seeds,
sandbox, the fingerprints of the stages it reads) as a nested mapping; it is flattened to dotted keys
(`models.policy.model`) and stored in `<stage>/params.json`. Resuming with different values is
refused before any work starts, naming every changed key, so two policies never mix in one file.
Values that only change speed or cost caps (workers, Ray address, budgets, progress) stay out.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from mirl.runner.layout import atomic_write_json


class ParamsMismatch(ValueError):
    """A run's stored params differ from the ones it is resumed with."""


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings to {dotted.key: leaf}; lists and scalars are leaves."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k in sorted(value, key=str):
            out.update(flatten(value[k], f"{prefix}{k}."))
        return out
    return {prefix[:-1]: value} if prefix else {"": value}


def digest(flat: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()[:16]


def changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Lines `key: old -> new` for every key whose value differs (added and removed keys included)."""
    lines = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<unset>"), new.get(key, "<unset>")
        if json.dumps(a, sort_keys=True, default=str) != json.dumps(b, sort_keys=True, default=str):
            lines.append(f"{key}: {a!r} -> {b!r}")
    return lines


def check_or_store(path: Path, fingerprint: dict[str, Any], *, run: str, stage: str, has_outputs: bool,
                   params: dict[str, Any] | None = None, store: bool = True) -> str:
    """Store the fingerprint of a new run; refuse one whose stored fingerprint differs. Returns the digest.

    `store=False` only checks (a stage checks before it reads its inputs and stores once they read)."""
    flat = flatten(fingerprint)
    if path.exists() and has_outputs:
        stored = json.loads(path.read_text()).get("fingerprint", {})
        diff = changed_keys(stored, flat)
        if diff:
            raise ParamsMismatch(
                f"run {run!r} stage {stage!r} was made with other params ({path}):\n  " + "\n  ".join(diff)
                + "\nStart a new run with another name (--name NEW), or overwrite this stage's outputs (--force).")
    if store:
        atomic_write_json(path, {"stage": stage, "digest": digest(flat), "fingerprint": flat, "params": params or {}})
    return digest(flat)


def stored_digest(path: Path) -> str | None:
    """The digest stored with a stage's outputs (None when it has none): later stages fingerprint it."""
    if not path.exists():
        return None
    return json.loads(path.read_text()).get("digest")
