"""python benchmarks/ledger.py [--threads 64] [--rows 20] [--repeats 3] [--dir DIR]

What writing the LLM ledger costs the episodes: `--threads` threads each record `--rows` rows into one
ledger, as 64 episodes in flight do once per policy step (the row is part of the step's model time). Rows,
side by side in one run, in turns (the order reversed every other repeat):
- `sync under the lock`: the ledger as it was, each whole `record` (its fsync included) one caller at a time, so
  every caller waits for all the syncs queued before its own;
- `sync after`: `mirl.llm.ledger.Ledger` as it is, the row written under the locks, synced outside them.
Printed: wall, rows/s, the mean and 90th percentile of one `record` call. `--dir` puts the ledgers on the
disk to measure (default: a temporary directory under the current one, not /tmp, which may be memory): what
a sync costs, and so the ratio, depends on that disk.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mirl.llm.ledger import Ledger  # noqa: E402


class SyncUnderLock(Ledger):
    """The ledger as it was: the whole `record`, its fsync included, one caller at a time."""

    def __init__(self, path):
        super().__init__(path)
        self._serial = threading.Lock()

    def record(self, **fields):
        with self._serial:
            return super().record(**fields)


def run(kind: type, path: Path, threads: int, rows: int) -> tuple[float, list[float]]:
    ledger, lat = kind(path), []

    def worker() -> None:
        for _ in range(rows):
            t = time.perf_counter()
            ledger.record(role="policy", stage="bench", model="local/smollm2", n=1)
            lat.append(time.perf_counter() - t)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - t0, lat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--rows", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=".")
    args = ap.parse_args()
    kinds = {"sync under the lock": SyncUnderLock, "sync after": Ledger}
    print(f"{args.threads} threads x {args.rows} rows\n| ledger | repeat | wall s | rows/s | mean ms a record | p90 ms |\n|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        for r in range(args.repeats):
            order = list(kinds.items()) if r % 2 == 0 else list(kinds.items())[::-1]
            for i, (name, kind) in enumerate(order):
                wall, lat = run(kind, Path(d) / f"{r}-{i}.jsonl", args.threads, args.rows)
                lat.sort()
                print(f"| {name} | {r + 1} | {wall:.3f} | {len(lat) / wall:.0f} | {1e3 * statistics.mean(lat):.2f} "
                      f"| {1e3 * lat[int(0.9 * len(lat))]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
