"""Usage ledger: one JSON line per LLM request in `<run_dir>/llm_calls.jsonl`.

Row fields: time, role, stage, model, n (samples), input_tokens, cached_input_tokens,
output_tokens, latency_s, cache_hit, cost_usd, price (table | litellm | none | cache), tries, error.
A cache hit is a row with cache_hit=true and zero tokens and cost: the ledger sums to what was
actually spent. Rows are appended, flushed and fsynced under a lock, so threads and kills leave
whole lines. The running spend (total and per stage) is kept in memory for the budget check;
clients sharing a run directory in one process share one `Ledger` (see `open_ledger`).
"""

from __future__ import annotations

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
        for row in _read_rows(self.path):
            self._count(row)

    def _count(self, row: dict[str, Any]) -> None:
        cost = float(row.get("cost_usd") or 0.0)
        self.spent_usd += cost
        stage = str(row.get("stage") or "")
        self.spent_by_stage[stage] = self.spent_by_stage.get(stage, 0.0) + cost

    def record(self, **fields: Any) -> dict[str, Any]:
        row = {c: None for c in COLUMNS}
        row.update(time=time.time(), n=1, input_tokens=0, cached_input_tokens=0, output_tokens=0, latency_s=0.0,
                   cache_hit=False, cost_usd=0.0, tries=1)
        row.update(fields)
        line = json.dumps(row, ensure_ascii=False, default=str) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            self._count(row)
        return row

    def spent(self, stage: str | None = None) -> float:
        with self._lock:
            return self.spent_usd if stage is None else self.spent_by_stage.get(stage, 0.0)


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
