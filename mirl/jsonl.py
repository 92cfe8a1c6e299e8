"""Append-only JSONL files: one record = one line, durable on return, safe to read after a kill.

Every stage stores its records this way so a run can be killed at any moment and resumed: a
record is either wholly on disk (its line ends with a newline) or it is a torn last line, which
the reader skips and reports and the writer cuts off before appending again. Without that cut, the
next record would be glued onto the fragment and both would be lost.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class ReadReport:
    """What `read_jsonl` skipped: a torn last line (a kill mid-write) or corrupt lines inside."""

    records: int = 0
    torn_tail: bool = False
    torn_bytes: int = 0
    bad_lines: list[int] = field(default_factory=list)  # 1-based line numbers that were not JSON objects

    @property
    def clean(self) -> bool:
        return not self.torn_tail and not self.bad_lines


def iter_jsonl(path: str | Path, report: ReadReport | None = None) -> Iterator[dict[str, Any]]:
    """Yield each complete JSON object; skip (and count in `report`) a torn last line and bad lines."""
    report = report if report is not None else ReadReport()
    path = Path(path)
    if not path.exists():
        return
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.endswith(b"\n") and not _whole(raw):  # only the last line can lack its newline: a torn write
                if raw.strip():
                    report.torn_tail, report.torn_bytes = True, len(raw)
                    log.warning("%s: skipped a torn last line (%d bytes, an interrupted write)", path, len(raw))
                break
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                record = None
            if not isinstance(record, dict):
                report.bad_lines.append(lineno)
                log.warning("%s:%d: skipped a line that is not a JSON object", path, lineno)
                continue
            report.records += 1
            yield record


def _whole(raw: bytes) -> bool:
    """A last line without its newline that is one whole JSON object: a file another tool wrote (no
    proper prefix of an object's text is an object), kept rather than cut as a torn write."""
    if not raw.rstrip().endswith(b"}"):  # most torn lines: no parse needed
        return False
    try:
        return isinstance(json.loads(raw), dict)
    except ValueError:
        return False


def read_jsonl(path: str | Path) -> tuple[list[dict[str, Any]], ReadReport]:
    """All complete records of a file (empty when it does not exist) and what was skipped."""
    report = ReadReport()
    return list(iter_jsonl(path, report)), report


def repair_tail(path: str | Path) -> int:
    """Cut a torn last line off so appends start on a fresh line (a whole record without its newline
    gets one); returns the bytes removed."""
    path = Path(path)
    if not path.exists():
        return 0
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        # walk back to the last newline in blocks; files can be large
        pos, block = size, 65536
        cut = 0
        while pos > 0:
            start = max(0, pos - block)
            f.seek(start)
            chunk = f.read(pos - start)
            i = chunk.rfind(b"\n")
            if i >= 0:
                cut = start + i + 1
                break
            pos = start
        f.seek(cut)
        if _whole(f.read(size - cut)):  # a whole record that lacks only its newline
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
            return 0
        f.truncate(cut)
        f.flush()
        os.fsync(f.fileno())
    removed = size - cut
    log.warning("%s: removed a torn last line (%d bytes) before appending", path, removed)
    return removed


class JsonlWriter:
    """Appends records to one file; thread-safe, each append flushed and fsynced before it returns."""

    def __init__(self, path: str | Path, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._lock = threading.Lock()
        self.repaired_bytes = repair_tail(self.path)
        self._f = open(self.path, "ab")

    def append(self, record: dict[str, Any]) -> None:
        # serialise outside the lock: a record that cannot be encoded fails here, leaving the file intact
        line = (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
        with self._lock:
            self._f.write(line)
            self._f.flush()
            if self.fsync:
                os.fsync(self._f.fileno())

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._f.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one record durably (opens and closes the file; use `JsonlWriter` for many)."""
    with JsonlWriter(path) as w:
        w.append(record)
