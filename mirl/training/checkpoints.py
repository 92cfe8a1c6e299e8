"""Training checkpoints and their selection.

    runs/<run>/training/checkpoints/step-000010/   config.json, model.safetensors, tokenizer files
                                                   (Hugging Face format: `transformers` and the
                                                   generators load it), learner.json, state.json,
                                                   and in the newest only optimizer.pt (or zero/)

Only the newest checkpoint keeps the optimizer state (`mirl.runner.inputs.RESUME_STATE`): resuming
reads the newest, and the state is twice the weights (Adam's two moments), so keeping it at every
step would triple the disk a run needs. Older checkpoints keep their weights, which selection and evaluation read.

A checkpoint is written to a temporary directory and renamed into place, so a directory with a
`state.json` is complete; anything else under `checkpoints/` is a torn write and is ignored (and
removed on the next save). Selection follows the paper: the top N checkpoints by the training
reward smoothed with a moving average, then the best of those on a validation task set.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mirl.runner.inputs import RESUME_STATE, checkpoint_dir

_NAME = re.compile(r"^step-(\d{6})$")


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under `root`, oldest first."""
    out = []
    for d in Path(root).glob("step-*") if Path(root).exists() else []:
        m = _NAME.match(d.name)
        if m and (d / "state.json").exists():
            out.append((int(m.group(1)), d))
    return sorted(out)


def latest(root: Path) -> tuple[int, Path] | None:
    found = list_checkpoints(root)
    return found[-1] if found else None


def save(root: Path, step: int, write: Callable[[Path], None], state: dict[str, Any]) -> Path:
    """Write a checkpoint atomically: `write(tmp)` fills a temporary directory, then state.json,
    then the rename."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    sweep(root)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    try:
        write(tmp)
        (tmp / "state.json").write_text(json.dumps({**state, "step": step}, indent=2, default=str))
        final = checkpoint_dir(root, step)
        old = None
        if final.exists():  # moved aside in one rename, never deleted in place: a kill mid-delete would leave
            old = _aside(root, final)  # a state.json beside missing weights
        try:
            tmp.rename(final)
        except BaseException:
            if old is not None:
                (old / final.name).rename(final)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return final
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def drop_resume_state(root: Path, newest: int) -> list[int]:
    """Remove the optimizer state of every complete checkpoint but step `newest`; the steps it was
    removed from. Each removal is one unlink or one rename aside, so a kill leaves a checkpoint with
    or without its state, never half of it."""
    dropped = []
    for step, d in list_checkpoints(root):
        if step == newest:
            continue
        found = False
        for name in RESUME_STATE:
            path = d / name
            if path.is_dir():
                shutil.rmtree(_aside(Path(root), path), ignore_errors=True)
                found = True
            elif path.exists():
                path.unlink()
                found = True
        if found:
            dropped.append(step)
    return dropped


def _aside(root: Path, d: Path) -> Path:
    """Move `d` (a checkpoint, or a directory in one) into a fresh `.tmp-old-*` directory (one rename)
    and return that directory."""
    old = Path(tempfile.mkdtemp(prefix=".tmp-old-", dir=root))
    d.rename(old / d.name)
    return old


def sweep(root: Path) -> None:
    """Remove what killed saves and prunes left: torn writes, and copies moved aside. A complete copy
    moved aside whose step has no checkpoint now (killed between a save's two renames) is put back."""
    for left in Path(root).glob(".tmp-*"):
        if left.name.startswith(".tmp-old-"):
            for d in left.glob("step-*"):
                if _NAME.match(d.name) and (d / "state.json").exists() and not (Path(root) / d.name).exists():
                    d.rename(Path(root) / d.name)
        shutil.rmtree(left, ignore_errors=True)


EARLIER = ("remove the checkpoint directory to resume from an earlier one (from its weights: only the newest "
           "checkpoint keeps the optimizer state, so the optimizer starts afresh)")


def read_state(path: Path) -> dict[str, Any]:
    """A checkpoint's state.json; a damaged one is a ValueError naming the file and the problem."""
    file = Path(path) / "state.json"
    try:
        state = json.loads(file.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{file}: a damaged checkpoint state, not JSON ({e}); {EARLIER}") from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise ValueError(f"{file}: a damaged checkpoint state: no integer 'step'; {EARLIER}")
    return state


def prune(root: Path, keep: int, protect: Sequence[int] = ()) -> list[int]:
    """Remove all but the newest `keep` checkpoints (and those in `protect`); 0 keeps all."""
    if keep <= 0:
        return []
    found = list_checkpoints(root)
    removed = []
    for step, d in found[:-keep]:
        if step not in set(protect):  # moved aside first: a kill mid-delete leaves no torn checkpoint
            shutil.rmtree(_aside(Path(root), d), ignore_errors=True)
            removed.append(step)
    return removed


def smoothed(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average (the first points average what they have)."""
    out, acc = [], []
    for v in values:
        acc.append(v)
        if len(acc) > window:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def top_by_reward(metrics: Sequence[dict[str, Any]], checkpoint_steps: Sequence[int], top: int = 5,
                  window: int = 10, key: str = "reward") -> list[dict[str, Any]]:
    """The `top` checkpoints by smoothed training reward at their step: [{step, smoothed_reward}],
    best first (ties: the later step)."""
    rows = sorted((m for m in metrics if m.get(key) is not None), key=lambda m: m["step"])
    curve = dict(zip((m["step"] for m in rows), smoothed([float(m[key]) for m in rows], max(1, window))))
    scored = [{"step": s, "smoothed_reward": curve[s]} for s in checkpoint_steps if s in curve]
    return sorted(scored, key=lambda r: (r["smoothed_reward"], r["step"]), reverse=True)[:top]
