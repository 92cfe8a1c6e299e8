"""A stage's progress, for a person watching: tqdm's bar in JupyterLab, a small file under `mirl batch`.

    bar = Progress(total=40, desc="taxonomy", unit="item", path=run.file("taxonomy", PROGRESS))
    bar.update(1); bar.set_postfix({"flags": 3}); bar.close()

With `MIRL_PROGRESS` unset (JupyterLab, a terminal) this is `tqdm.auto`'s bar, as before. Under
`mirl batch` the kernel runs with `MIRL_PROGRESS=file`: no bar is drawn (the executed notebook's cells
stay small, no tqdm frames reach the logs) and `progress.json` in the stage's directory is rewritten
atomically at most about once a second, and once more at the end. The batch process reads it and
redraws one line per stage. The file holds: desc, unit, done, total, rate (units/s), eta_s, fields
(the stage's own postfix, e.g. flags or reward), elapsed_s, finished, updated (epoch seconds).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from mirl.runner.layout import atomic_write_json

PROGRESS = "progress.json"
ENV = "MIRL_PROGRESS"
EVERY_S = 1.0


def file_mode() -> bool:
    """True when the kernel runs under `mirl batch` (progress to the file, no bar)."""
    return os.environ.get(ENV, "") == "file"


class Progress:
    """tqdm's interface as the stages use it (update, set_postfix, close), plus the progress file."""

    def __init__(self, total: int, desc: str, unit: str, path: str | Path | None = None, initial: int = 0,
                 disable: bool = False):
        self.total, self.desc, self.unit, self.path = int(total), desc, unit, Path(path) if path else None
        self.done = self.initial = int(initial)
        self.fields: dict[str, Any] = {}
        self.t0 = time.monotonic()
        self._written = 0.0
        self._bar = None
        if not file_mode():
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, initial=initial, disable=disable, desc=desc, unit=unit)
        self._write(force=True)

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        self._write()

    def set_postfix(self, fields: dict[str, Any], refresh: bool = True) -> None:
        self.fields = {k: _short(v) for k, v in fields.items()}
        if self._bar is not None:
            self._bar.set_postfix(fields, refresh=refresh)
        self._write()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self._write(force=True, finished=True)

    def state(self, finished: bool = False) -> dict[str, Any]:
        elapsed = time.monotonic() - self.t0
        rate = (self.done - self.initial) / elapsed if elapsed > 0 else 0.0
        left = max(self.total - self.done, 0)
        return {"desc": self.desc, "unit": self.unit, "done": self.done, "total": self.total,
                "rate": round(rate, 4), "eta_s": round(left / rate, 1) if rate > 0 else None,
                "fields": self.fields, "elapsed_s": round(elapsed, 2), "finished": finished, "updated": time.time()}

    def _write(self, force: bool = False, finished: bool = False) -> None:
        if self.path is None:
            return
        now = time.monotonic()
        if not force and now - self._written < EVERY_S:
            return
        self._written = now
        try:
            atomic_write_json(self.path, self.state(finished))
        except OSError:  # progress is for show: a full disk must not fail the stage here
            pass


def _short(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, (int, str, bool)) or value is None:
        return value
    return str(value)
