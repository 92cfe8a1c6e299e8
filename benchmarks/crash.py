"""Crash safety, the long form: every stage killed with SIGKILL at seeded random points, restarted.

    python benchmarks/crash.py                        # 10 kills of each cheap stage
    python benchmarks/crash.py --kills 3 --stages taxonomy prefixes
    python benchmarks/crash.py --training-kills 10 --training-steps 10   # + training on SmolLM2 (slow on a CPU)
    python benchmarks/crash.py --stages --batch-kills 3   # `mirl batch --to 02`, real notebooks, bubblewrap

A straight run of the small pipeline first (the in-memory sandbox double, every LLM role through the
real client to a local OpenAI-compatible server), then per stage: its inputs copied, the stage started
as a process and killed `--kills` times (once a seeded number of new records is on disk, plus a seeded
wait), then run to the end. Prints one row per stage: kills, whether the final outputs equal the
straight run's, records lost, duplicated and torn, paid ledger rows beyond the replies the server
sent (double counts), and replies sent to a process killed before it could record them. Exit 1 when
any stage did not survive.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability import crash_driver  # noqa: E402
from tests.reliability.crash_harness import (  # noqa: E402
    crash_batch,
    crash_stage,
    crash_training,
    reference_pipeline,
    table,
)
from tests.reliability.fault_server import FaultServer  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--stages", nargs="*", default=list(crash_driver.STAGES))
    ap.add_argument("--training-kills", type=int, default=0, help="kills of the training stage (0: leave it out)")
    ap.add_argument("--training-steps", type=int, default=3,
                    help="steps of the training run (a kill lands between checkpoints: kills <= steps)")
    ap.add_argument("--batch-kills", type=int, default=0,
                    help="kills of `mirl batch --to 02` on the real notebooks and bubblewrap (0: leave it out)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--delay", type=float, default=0.05, help="seconds each sandbox command takes")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="mirl-crash-") as tmp, FaultServer(reply=crash_driver.reply) as server:
        root = Path(tmp)
        t0 = time.monotonic()
        ref = reference_pipeline(root, server.url)
        print(f"straight run of {', '.join(crash_driver.STAGES)}: {time.monotonic() - t0:.0f} s", flush=True)
        for stage in args.stages:
            r = crash_stage(stage, ref, root / "crash" / stage, server.served, args.kills, rng, delay=args.delay)
            results.append(r)
            print(table([r]).splitlines()[1], *r.differences, sep="\n", flush=True)
        if args.training_kills:
            r = crash_training(ref, root / "crash" / "training", server.served, args.training_kills, rng,
                               steps=args.training_steps)
            results.append(r)
            print(table([r]).splitlines()[1], *r.differences, sep="\n", flush=True)
        if args.batch_kills:
            from tests.batch.batch_pipeline import register_kernel

            jupyter = register_kernel(root / "kernel")
            r = crash_batch(root, server.url, server.served, args.batch_kills, rng, jupyter)
            results.append(r)
            print(table([r]).splitlines()[1], *r.differences, sep="\n", flush=True)
    print()
    print(table(results))
    return 0 if all(r.survived for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
