"""python benchmarks/engine_host_calls.py [--episodes 32] [--turns 3] [--repo PATH] [--detail] [--workload agents]

How many torch calls the paged engine's host code makes per decode step and per prefill pass, on a CPU
with a tiny random model (deterministic: counts, not times; no GPU needed); what is counted is in
`tests/engines/host_calls.py`.

Why count them: every torch call releases the GIL and takes it back, and while episode threads run
Python, taking it back waits up to the thread switch interval (0.5 ms in an engine's process). On a GPU
a decode step, a new layout of the rows, a prefill pass and a pass's first tokens are each one CUDA graph
replay, so what the owner thread pays is about the number of calls its host code makes outside them.
This counts exactly those: torch functions, tensor methods and indexing called from `mirl/engines/paged/
engine.py` or `batch.py` on the owner thread, outside `DeviceBatch._run` (whose step is the graph on a
GPU; it counts as one call, the replay). The CPU path skips the pinned copies and events a GPU makes
(about 4 a decode step: the staging copy, the output copy, its event, the wait; 2 a pass), so a GPU's counts are a little higher;
indexing and views are counted too, though not every one of them gives the GIL away.

The workload: `--episodes` threads, each its own prompt, `--turns` turns of up to 24 tokens with an
observation appended between turns (the agents workload in small). `--repo` imports `mirl` from another
checkout (e.g. a `git worktree` of an older commit), to compare side by side in one command:

    python benchmarks/engine_host_calls.py; python benchmarks/engine_host_calls.py --repo ../old
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--repo", default=str(REPO), help="the checkout whose mirl is measured")
    ap.add_argument("--detail", action="store_true", help="every call site with its count")
    ap.add_argument("--workload", choices=("agents", "together"), default="agents",
                    help="together: --episodes one-turn requests that go in in one pass (tests/engines/host_calls.py)")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from tests.engines.host_calls import host_calls  # this checkout's (they import mirl when called)
    from tests.engines.tiny import tiny_checkpoint

    sys.path.insert(0, str(Path(args.repo).resolve()))  # then mirl from --repo
    assert "mirl" not in sys.modules

    with tempfile.TemporaryDirectory() as tmp:
        out = host_calls(tiny_checkpoint(Path(tmp), "qwen3"), args.episodes, args.turns, args.detail,
                         args.workload)
    print(json.dumps({"repo": Path(args.repo).resolve().name, **out}))


if __name__ == "__main__":
    main()
