"""Device time, recorded by the stages that hold a device: `runs/<run>/device_time.jsonl`.

One row per stretch of work on a device: stage, training step (or none), device kind (e.g.
"NVIDIA H200", "cpu"), how many devices, seconds of wall time. Device-seconds are seconds x count,
GPU hours their sum over GPU kinds / 3600. A stage calls `record_device_time` after each piece of
work (the training stage: once per step, with the step's wall time), or wraps it in `device_clock`.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mirl.jsonl import append_jsonl, read_jsonl

DEVICE_FILE = "device_time.jsonl"
_LOCK = threading.Lock()


def device_kind(device: Any) -> str:
    """A readable kind for a device: the GPU's name for cuda devices, else the device type ("cpu")."""
    name = str(device)
    if name.startswith("cuda"):
        try:
            import torch

            if torch.cuda.is_available():
                index = int(name.split(":", 1)[1]) if ":" in name else torch.cuda.current_device()
                return torch.cuda.get_device_name(index)
        except Exception:  # noqa: BLE001 - a name is a label; fall back to the device string
            pass
        return "cuda"
    return name.split(":", 1)[0] or "cpu"


def record_device_time(run_dir: str | Path, stage: str, seconds: float, device: Any = "cpu", count: int = 1,
                       step: int | None = None, part: str = "") -> dict[str, Any]:
    """Append one row of device time to the run's device ledger (whole lines, fsynced)."""
    if seconds < 0 or count < 1:
        raise ValueError(f"device time needs seconds >= 0 and count >= 1, got {seconds!r}, {count!r}")
    row = {"time": time.time(), "stage": stage, "step": step, "part": part,
           "device": device_kind(device), "count": int(count), "seconds": round(float(seconds), 6)}
    with _LOCK:  # a torn line a kill left is cut first, or this row would be glued to it and lost
        append_jsonl(Path(run_dir) / DEVICE_FILE, row)
    return row


@contextmanager
def device_clock(run_dir: str | Path, stage: str, device: Any = "cpu", count: int = 1, step: int | None = None,
                 part: str = ""):
    """Record the wall time of the `with` block as device time."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        record_device_time(run_dir, stage, time.perf_counter() - t0, device, count, step, part)


def read_device_time(run_dir: str | Path) -> list[dict[str, Any]]:
    """The run's device rows (a torn last line from a kill is skipped)."""
    return read_jsonl(Path(run_dir) / DEVICE_FILE)[0]


def is_gpu(kind: str) -> bool:
    return str(kind).lower() not in ("cpu", "", "none", "mps")
