"""Where a run keeps its files: every file name of the run directory is defined here, once.

    runs/<run>/
      llm_calls.jsonl           the LLM ledger of every stage (mirl.llm.ledger)
      llm_cache/                cached LLM answers (mirl.llm.cache)
      recipes.json              the training recipes the params list, in order (written by `mirl batch`)
      recipes/<recipe>/         a training recipe's own run: its training/, links to the shared stages
      <stage>/
        params.json             the params that made the stage's outputs, and their fingerprint
        <records file>          one record per finished work item (append-only, the resume point)
        summary.json            written when the stage finishes (or stops on its budget)
        ...                     the stage's derived outputs (e.g. profiling/error_steps.jsonl)

Stages name their own derived files through `RunDir.file(stage, name)` so that a reader of
another stage's output goes through the same place (and the typed loaders of `mirl.records`).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LEDGER = "llm_calls.jsonl"
LLM_CACHE = "llm_cache"
PARAMS = "params.json"
SUMMARY = "summary.json"
RECIPES = "recipes"
RECIPES_FILE = "recipes.json"


def atomic_write(path: str | Path, text: str) -> None:
    """Replace `path` with `text` so readers (and a kill) see the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_write_json(path: str | Path, value: Any) -> None:
    atomic_write(path, json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


def atomic_write_jsonl(path: str | Path, records: list[dict[str, Any]]) -> None:
    atomic_write(path, "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in records))


@dataclass(frozen=True)
class RunDir:
    """The directory of one named run (`runs/<name>`)."""

    root: Path

    def __init__(self, root: str | Path):
        object.__setattr__(self, "root", Path(root))

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def ledger(self) -> Path:
        return self.root / LEDGER

    @property
    def llm_cache(self) -> Path:
        return self.root / LLM_CACHE

    def recipe(self, name: str) -> RunDir:
        """The run directory of one training recipe of this run (`mirl.recipes`)."""
        return RunDir(self.root / RECIPES / name)

    def recipes(self) -> dict[str, RunDir]:
        """The training recipes of this run, in the params' order, by name: those `recipes.json` lists
        (`mirl batch` writes it from the params each time it starts, so a recipe dropped from the params
        drops out here though its directory stays). {} for a run without recipes."""
        path = self.root / RECIPES_FILE
        if not path.exists():
            return {}
        names = json.loads(path.read_text())
        if not isinstance(names, list) or not all(isinstance(n, str) and n and "/" not in n for n in names):
            raise ValueError(f"{path}: not a list of recipe names")
        return {n: self.recipe(n) for n in names}

    def stage_dir(self, stage: str) -> Path:
        """`runs/<run>/<stage>`; a stage with an empty directory name writes at the run's root."""
        return self.root / stage if stage else self.root

    def file(self, stage: str, name: str) -> Path:
        return self.stage_dir(stage) / name

    def params(self, stage: str) -> Path:
        return self.file(stage, PARAMS)

    def summary(self, stage: str) -> Path:
        return self.file(stage, SUMMARY)

    def read_summary(self, stage: str) -> dict[str, Any] | None:
        path = self.summary(stage)
        return json.loads(path.read_text()) if path.exists() else None

    def clear_stage(self, stage: str, files: list[str]) -> None:
        """Remove a stage's outputs (for `--force`); a stage at the run's root removes only its files."""
        directory = self.stage_dir(stage)
        if stage:
            shutil.rmtree(directory, ignore_errors=True)
            return
        for name in [*files, PARAMS, SUMMARY]:
            (directory / name).unlink(missing_ok=True)
