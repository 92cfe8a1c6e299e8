"""python benchmarks/spawn_gil.py [--gb 4] [--cuda] [--sessions 32] [--threads 8] [--backends local,bwrap]

What starting sandbox sessions costs the other threads of a big process (one that owns a GPU: CUDA's
mappings, the model and pinned buffers make it several GB). A ticker thread asks for the GIL every
0.5 ms while `--threads` threads start `--sessions` sessions of tasks/count-lines in all; printed: the
ticker's longest wait and its time lost to waits over 2 ms, per row, with `--gb` GB of this process
touched (with `--cuda`, also a CUDA context and 2 GB of pinned host memory, as an engine's process has).
Rows, side by side in one run:
- `popen+preexec`: a bare `Popen` of the same Python with a no-op `preexec_fn`, which is how the local
  and bwrap backends started their runner before `mirl.sandbox.prelude`: a fork (never a vfork) with
  the GIL held while the page tables are copied.
- `popen`: the same without `preexec_fn` (CPython vforks; the GIL is released).
- each backend in `--backends` as it is (its runner started through the prelude).
A training step on an H200 started ~124 sessions in its ~24 s; its engine thread's host time was 8.5 ms a
decode step against 0.3 ms in `engine_bench.py`'s `agents` (benchmarks/gpu/NOTES.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def ticker(stop: threading.Event, gaps: list[float]) -> None:
    last = time.perf_counter()
    while not stop.is_set():
        time.sleep(0.0005)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now


def measure(name: str, start_one, n: int, threads: int) -> dict:
    gaps: list[float] = []
    stop = threading.Event()
    t = threading.Thread(target=ticker, args=(stop, gaps))
    t.start()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda _: start_one(), range(n)))
    wall = time.perf_counter() - t0
    stop.set()
    t.join()
    return {"row": name, "sessions": n, "wall_s": round(wall, 2), "per_start_ms": round(1e3 * wall * threads / n, 1),
            "ticker_max_wait_ms": round(1e3 * max(gaps), 1),
            "ticker_lost_s": round(sum(g for g in gaps if g > 0.002), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gb", type=float, default=4.0, help="GB this process touches first (a GPU process's size)")
    ap.add_argument("--cuda", action="store_true", help="also a CUDA context and 2 GB of pinned memory (torch)")
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--backends", default="local,bwrap")
    args = ap.parse_args()
    import numpy as np

    from mirl.sandbox.base import SandboxConfig
    from mirl.sandbox.select import make_sandbox
    from mirl.tasks import load_task

    big = np.ones(int(args.gb * (1 << 27)), dtype=np.float64)  # touched: resident, as a GPU process's memory is
    if args.cuda:
        import torch

        held = (torch.zeros(1 << 28, device="cuda"), torch.empty(1 << 31, dtype=torch.uint8, pin_memory=True))
    argv = [sys.executable, "-I", "-S", "-c", "pass"]
    rows = [
        measure("popen+preexec", lambda: subprocess.Popen(argv, preexec_fn=lambda: None, start_new_session=True).wait(),
                args.sessions, args.threads),
        measure("popen", lambda: subprocess.Popen(argv, start_new_session=True).wait(), args.sessions, args.threads),
    ]
    task = load_task(Path(__file__).resolve().parents[1] / "tasks" / "count-lines")
    for backend in [b for b in args.backends.split(",") if b]:
        try:
            sandbox = make_sandbox(SandboxConfig(backend=backend))

            def one(sandbox=sandbox):
                with sandbox.start(task) as s:
                    s.run("true")

            one()  # the backend's first start (layers, probes) is not what is measured
            rows.append(measure(backend, one, args.sessions, args.threads))
        except Exception as e:  # noqa: BLE001 - a backend this machine lacks is a row saying so
            rows.append({"row": backend, "error": f"{type(e).__name__}: {e}"[:200]})
    del big
    if args.cuda:
        del held
    print(f"\n{args.gb:g} GB resident{' + CUDA' if args.cuda else ''}, {args.sessions} starts from {args.threads} threads; ticker every 0.5 ms")
    print(f"{'row':<15}{'wall s':>8}{'ms/start':>10}{'ticker max wait ms':>20}{'ticker lost s':>15}")
    for r in rows:
        if "error" in r:
            print(f"{r['row']:<15}{r['error']}")
            continue
        print(f"{r['row']:<15}{r['wall_s']:>8}{r['per_start_ms']:>10}{r['ticker_max_wait_ms']:>20}{r['ticker_lost_s']:>15}")


if __name__ == "__main__":
    main()
