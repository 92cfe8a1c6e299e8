"""Disk cache of sampled answers, one file per (request, sample index).

The key hashes everything that determines an answer: model, server, messages, sampling params,
seed and the sample index. Storing each sample under its own index is what makes "n=4 after n=2"
reuse the first two and sample only two more. Files are written to a temp name and renamed, so a
killed process leaves either the old state or the complete new file, never half a JSON.
API keys are not part of the key nor of the stored value.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mirl.llm.types import Completion, Message

CACHE_VERSION = 1


def request_key(model: str, messages: list[Message], params: dict[str, Any], api_base: str = "") -> str:
    """Hash of the request without the sample index (the index is added per sample)."""
    blob = json.dumps({"v": CACHE_VERSION, "model": model, "api_base": api_base, "messages": messages,
                       "params": params}, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def sample_key(request: str, index: int) -> str:
    return hashlib.sha256(f"{request}:{index}".encode()).hexdigest()


class DiskCache:
    """`<dir>/<k[:2]>/<k>.json` files holding one `Completion` each."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.json"

    def get(self, key: str) -> Completion | None:
        try:
            data = json.loads(self._path(key).read_text())
        except (FileNotFoundError, json.JSONDecodeError, OSError):
            return None  # a missing or unreadable entry is just a miss
        fields = Completion.__dataclass_fields__
        return Completion(**{k: v for k, v in data.get("completion", {}).items() if k in fields})

    def put(self, key: str, completion: Completion, meta: dict[str, Any] | None = None) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"v": CACHE_VERSION, "completion": asdict(completion), "meta": meta or {}}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(record, f, ensure_ascii=False)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def __len__(self) -> int:
        return sum(1 for _ in self.dir.glob("*/*.json")) if self.dir.exists() else 0
