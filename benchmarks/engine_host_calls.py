"""python benchmarks/engine_host_calls.py [--episodes 32] [--turns 3] [--repo PATH] [--detail]

How many torch calls the paged engine's host code makes per decode step and per prefill pass, on a CPU
with a tiny random model (deterministic: counts, not times; no GPU needed).

Why count them: every torch call releases the GIL and takes it back, and while episode threads run
Python, taking it back waits up to the thread switch interval (5 ms by default). On a GPU the model's
forward and the sampler of a decode step or a prefill pass are one CUDA graph replay, so what the owner
thread pays per step is about the number of calls its host code makes outside the captured step. This
counts exactly those: torch functions, tensor methods and indexing called from `mirl/engines/paged/
engine.py` or `batch.py` on the owner thread, outside `DeviceBatch._run` (whose step is the graph on a
GPU; it counts as one call, the replay) and outside the sampler of the first tokens (one compiled call on a
GPU, counted as one). The CPU path skips the pinned copies and events a GPU makes
(about 3 a decode step: the output copy, its event, the wait), so a GPU's counts are a little higher;
indexing and views are counted too, though not every one of them gives the GIL away.

The workload: `--episodes` threads, each its own prompt, `--turns` turns of up to 24 tokens with an
observation appended between turns (the agents workload in small). `--repo` imports `mirl` from another
checkout (e.g. a `git worktree` of an older commit), to compare side by side in one command:

    python benchmarks/engine_host_calls.py; python benchmarks/engine_host_calls.py --repo ../old
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--repo", default=str(REPO), help="the checkout whose mirl is measured")
    ap.add_argument("--detail", action="store_true", help="every call site with its count")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))  # tests.engines.tiny
    sys.path.insert(0, str(Path(args.repo).resolve()))
    from torch.overrides import TorchFunctionMode

    from mirl.engines.paged import batch as batch_mod
    from mirl.engines.paged import engine as engine_mod
    from tests.engines.tiny import tiny_checkpoint

    host_files = {batch_mod.__file__, engine_mod.__file__}
    counts: Counter = Counter()
    where: Counter = Counter()  # by phase, function, line and torch function
    inside = threading.local()

    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, a=(), kw=None):
            if not getattr(inside, "run", False):
                caller = sys._getframe(1)
                while caller is not None and "/torch/" in caller.f_code.co_filename:
                    caller = caller.f_back
                if caller is not None and caller.f_code.co_filename in host_files:
                    counts[getattr(inside, "phase", "other")] += 1
                    where[f"{getattr(inside, 'phase', 'other')} {caller.f_code.co_name}:{caller.f_lineno} {func.__name__}"] += 1
            return func(*a, **(kw or {}))

    run = batch_mod.DeviceBatch._run

    def counted_run(self, key, step):
        counts[getattr(inside, "phase", "other")] += 1  # the replay of the step's graph on a GPU
        counts[f"{key[0]} graphs"] += 1
        inside.run = True
        try:
            return run(self, key, step)
        finally:
            inside.run = False

    batch_mod.DeviceBatch._run = counted_run
    sample = engine_mod.sampler.sample

    def counted_sample(*a, **kw):  # the first tokens' sampler: one compiled call on a GPU
        was = getattr(inside, "run", False)
        if not was:
            counts[getattr(inside, "phase", "other")] += 1
        inside.run = True
        try:
            return sample(*a, **kw)
        finally:
            inside.run = was

    engine_mod.sampler.sample = counted_sample

    def phase(name, fn):
        def wrapped(self, *a, **kw):
            inside.phase = name
            try:
                return fn(self, *a, **kw)
            finally:
                inside.phase = "other"
        return wrapped

    E = engine_mod.PagedEngine
    # a decode step: its launch and its read-back; a prefill pass: the pass and its rows' first tokens
    E._launch, E._collect, E._prefill_pass = (phase("decode", E._launch), phase("decode", E._collect),
                                              phase("prefill", E._prefill_pass))
    serve = E._serve

    def counted_serve(self):
        with Count():
            return serve(self)

    E._serve = counted_serve

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = tiny_checkpoint(Path(tmp), "qwen3")
        e = engine_mod.PagedEngine(ckpt, device="cpu", dtype="float32", page_size=16, kv_tokens=1 << 16,
                                   prefill_tokens=512)
        rng = random.Random(0)
        vocab = e.pm.vocab

        def ids(n):
            return [rng.randrange(10, vocab) for _ in range(n)]

        starts = [ids(rng.randrange(60, 200)) for _ in range(args.episodes)]
        observations = [[ids(rng.randrange(10, 40)) for _ in range(args.turns)] for _ in range(args.episodes)]

        def episode(i):
            prompt = list(starts[i])
            for t in range(args.turns):
                s = e.generate_tokens(prompt, [0], max_tokens=24, temperature=1.0, seed=i, stop_ids=[]).samples[0]
                prompt += s.ids + observations[i][t]

        threads = [threading.Thread(target=episode, args=(i,)) for i in range(args.episodes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = dict(e.stats)
        e.close()
    decode, prefill = counts["decode graphs"], counts["prefill graphs"]
    out = {"repo": Path(args.repo).resolve().name, "episodes": args.episodes, "turns": args.turns,
           "decode_steps": decode, "prefill_passes": prefill, "requests": stats["requests"],
           "host_calls_per_decode_step": round(counts["decode"] / max(1, decode), 2),
           "host_calls_per_prefill_pass": round(counts["prefill"] / max(1, prefill), 2),
           "other_host_calls": counts["other"]}
    if args.detail:
        out["calls"] = dict(where.most_common())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
