"""Time the main job: the whole demo batch from nothing, per stage, against its 15-minute budget.

    python benchmarks/demo_time.py [--params params/demo.yaml] [--cores 2] [--name NAME] [--budget-min 15]

Runs `mirl batch` on a fresh run name (nothing reused from an earlier run) pinned to `--cores` CPUs
(when the machine has more), then prints each stage's wall time (the notebook's whole kernel run, and
the stage's own work from its summary) from the batch's record, the total, and whether it fits the
budget. Other load on the machine counts against the numbers: note it beside them (`uptime`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default=str(REPO / "params" / "demo.yaml"))
    ap.add_argument("--cores", type=int, default=2, help="CPUs the batch may use (taskset)")
    ap.add_argument("--name", default=None, help="run name (default: demo-time-<timestamp>)")
    ap.add_argument("--budget-min", type=float, default=15.0)
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE params overrides passed to mirl batch (-p)")
    args = ap.parse_args()

    from mirl.batch import time_table

    name = args.name or time.strftime("demo-time-%Y%m%d-%H%M%S")
    cmd = [sys.executable, "-m", "mirl", "batch", "--params", args.params, "--name", name]
    for o in args.overrides:
        cmd += ["-p", o]
    cpus = sorted(os.sched_getaffinity(0))
    pin = cpus[:args.cores]
    load = os.getloadavg()[0]
    print(f"demo batch {name}: {len(pin)} of {len(cpus)} CPUs, load average {load:.1f} at start", flush=True)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, preexec_fn=lambda: os.sched_setaffinity(0, pin))
    wall = time.monotonic() - t0
    state_file = REPO / "runs" / name / "batch.json"
    if not state_file.exists():
        print(f"no batch record at {state_file}: the batch did not start (exit {proc.returncode})")
        return 1
    state = json.loads(state_file.read_text())
    ran = [s for s, e in state.get("stages", {}).items() if e.get("elapsed_s") is not None]
    print()
    print(time_table(state, ran))
    verdict = "within" if proc.returncode == 0 and wall <= args.budget_min * 60 else "NOT within"
    print(f"\nwhole command {wall / 60:.1f} min on {len(pin)} CPUs, exit {proc.returncode}: {verdict} the "
          f"{args.budget_min:g}-minute budget; load average {os.getloadavg()[0]:.1f} at the end")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
