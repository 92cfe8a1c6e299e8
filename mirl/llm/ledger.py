"""Usage ledger: one JSON line per LLM request in `<run_dir>/llm_calls.jsonl`.

Row fields: time, role, stage, model, n (samples), input_tokens, cached_input_tokens,
output_tokens, latency_s, cache_hit, cost_usd, price (table | litellm | none | cache), tries, error.
A cache hit is a row with cache_hit=true and zero tokens and cost: the ledger sums to what was
actually spent. Each row is one `write` of a whole line on an append-only descriptor under a thread
lock and an exclusive `flock`, then fsynced outside both (`benchmarks/ledger.py`: one sync at a time made
each of 64 threads wait for the others'), so threads, processes and kills leave whole lines; a
torn last line (a kill on another filesystem) is cut off before the next append, so it cannot swallow
the next row. The running spend (total and per stage) is kept in memory and brought up to date
with the rows other processes appended before every budget check, so workers in several processes
sharing one run directory each overspend a cap by at most the call they have in flight. Clients
sharing a run directory in one process share one `Ledger` (see `open_ledger`).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

LEDGER_FILE = "llm_calls.jsonl"
COLUMNS = ["time", "role", "stage", "model", "n", "input_tokens", "cached_input_tokens", "output_tokens",
           "latency_s", "cache_hit", "cost_usd", "price", "tries", "error"]


class Ledger:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self.spent_usd = 0.0
        self.spent_by_stage: dict[str, float] = {}
        self._offset = 0  # bytes of the file already counted (whole lines only)
        self._head = b""  # the first whole lines counted (up to 256 bytes; rows carry their time): another
        self._refresh()  # file, or this one rewritten, differs there

    def _reset(self) -> None:
        self.spent_usd, self.spent_by_stage, self._offset, self._head = 0.0, {}, 0, b""

    def _count(self, row: dict[str, Any]) -> None:
        cost = float(row.get("cost_usd") or 0.0)
        self.spent_usd += cost
        stage = str(row.get("stage") or "")
        self.spent_by_stage[stage] = self.spent_by_stage.get(stage, 0.0) + cost

    def _refresh(self) -> None:
        """Count the whole lines appended since the last look (by this process or any other). A file
        removed, replaced or cut shorter (a run directory deleted and made again, as a notebook kernel
        that outlives it may do) is counted afresh: the file is the truth, not what was read of it."""
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self._offset or f.read(len(self._head)) != self._head:
                    self._reset()
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            self._reset()
            return
        end = data.rfind(b"\n") + 1
        for raw in data[:end].splitlines():
            try:
                row = json.loads(raw)
            except ValueError:
                continue  # a torn line cut off by a repair elsewhere, or a corrupt one: not a call
            if isinstance(row, dict):
                self._count(row)
        if not self._offset:
            self._head = data[:min(end, 256)]
        self._offset += end

    def record(self, **fields: Any) -> dict[str, Any]:
        row = {c: None for c in COLUMNS}
        row.update(time=time.time(), n=1, input_tokens=0, cached_input_tokens=0, output_tokens=0, latency_s=0.0,
                   cache_hit=False, cost_usd=0.0, tries=1)
        row.update(fields)
        line = (json.dumps(row, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                _cut_torn_tail(fd)
                end = os.fstat(fd).st_size
                written = os.write(fd, line)
                if written != len(line):  # a full disk: leave no part of a row for the next writer to cut
                    os.ftruncate(fd, end)
                    raise OSError(f"{self.path}: wrote {written} of a row's {len(line)} bytes (disk full?)")
                fcntl.flock(fd, fcntl.LOCK_UN)
                self._refresh()
            except BaseException:
                os.close(fd)
                raise
        try:  # outside the locks: 64 episode threads' syncs overlap instead of queueing behind each other
            os.fsync(fd)
        finally:
            os.close(fd)
        return row

    def spent(self, stage: str | None = None) -> float:
        with self._lock:
            self._refresh()
            return self.spent_usd if stage is None else self.spent_by_stage.get(stage, 0.0)


def _cut_torn_tail(fd: int) -> None:
    """Truncate a last line that lacks its newline (its writer was killed); the caller holds the flock."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    pos = size
    while pos > 0:
        start = max(0, pos - 65536)
        i = os.pread(fd, pos - start, start).rfind(b"\n")
        if i >= 0:
            os.ftruncate(fd, start + i + 1)
            return
        pos = start
    os.ftruncate(fd, 0)


_OPEN: dict[Path, Ledger] = {}
_OPEN_LOCK = threading.Lock()


def open_ledger(run_dir: str | Path) -> Ledger:
    """The process-wide `Ledger` for a run directory (one per path, so spend totals agree)."""
    path = (Path(run_dir) / LEDGER_FILE).resolve()
    with _OPEN_LOCK:
        if path not in _OPEN:
            _OPEN[path] = Ledger(path)
        return _OPEN[path]


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn last line from a crash on another filesystem; skip it
    return rows


def read_ledger(run_dir: str | Path):
    """The ledger of a run as a pandas DataFrame (empty, with the columns, when there is none)."""
    import pandas as pd

    path = Path(run_dir) / LEDGER_FILE
    rows = _read_rows(path)
    df = pd.DataFrame(rows, columns=COLUMNS) if not rows else pd.DataFrame(rows)
    for c in COLUMNS:
        if c not in df.columns:
            df[c] = None
    return df


def summarize(run_dir_or_frame, by: tuple[str, ...] = ("stage", "role")):
    """Calls, cache hits, errors, tokens and cost per stage and role (or any other columns)."""
    import pandas as pd

    df = run_dir_or_frame if isinstance(run_dir_or_frame, pd.DataFrame) else read_ledger(run_dir_or_frame)
    keys = list(by)
    if df.empty:
        return pd.DataFrame(columns=keys + ["calls", "cache_hits", "errors", "input_tokens", "cached_input_tokens",
                                            "output_tokens", "cost_usd", "latency_s"])
    df = df.assign(is_error=df["error"].notna(), cache_hit=df["cache_hit"].fillna(False).astype(bool))
    out = df.groupby(keys, dropna=False).agg(
        calls=("model", "size"),
        cache_hits=("cache_hit", "sum"),
        errors=("is_error", "sum"),
        input_tokens=("input_tokens", "sum"),
        cached_input_tokens=("cached_input_tokens", "sum"),
        output_tokens=("output_tokens", "sum"),
        cost_usd=("cost_usd", "sum"),
        latency_s=("latency_s", "sum"),
    )
    return out.reset_index()
