"""The torch calls the paged engine's host code makes on its owner thread, counted on a CPU.

Every torch call gives the GIL away and takes it back, which costs up to the thread switch interval
while other threads run Python; on a GPU what `DeviceBatch._run` runs (a decode step, a new layout of
the rows, a prefill pass, a pass's first tokens) is one CUDA graph replay, so what the owner thread pays
is about the calls its host code makes outside those. Counted here: torch functions, tensor methods and
indexing called from `mirl/engines/paged/engine.py` or `batch.py` on the owner thread, outside
`DeviceBatch._run` (the replay counts as one) and, for older checkouts (`--repo`), outside the sampler of
their first tokens (one compiled call on a GPU); by phase: a decode step (its launch
and read-back), a prefill pass (with its rows' first tokens). Used by `benchmarks/engine_host_calls.py`
and `tests/engines/test_paged.py`.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager


@contextmanager
def counting():
    """Patches the engine classes for the duration; yields (counts by phase, counts by call site)."""
    from torch.overrides import TorchFunctionMode

    from mirl.engines.paged import batch as batch_mod
    from mirl.engines.paged import engine as engine_mod

    host_files = {batch_mod.__file__, engine_mod.__file__}
    counts: Counter = Counter()
    where: Counter = Counter()
    inside = threading.local()

    def phase_now() -> str:
        return getattr(inside, "phase", "other")

    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, a=(), kw=None):
            if not getattr(inside, "run", False):
                caller = sys._getframe(1)
                while caller is not None and "/torch/" in caller.f_code.co_filename:
                    caller = caller.f_back
                if caller is not None and caller.f_code.co_filename in host_files:
                    counts[phase_now()] += 1
                    where[f"{phase_now()} {caller.f_code.co_name}:{caller.f_lineno} {func.__name__}"] += 1
            return func(*a, **(kw or {}))

    def as_one(fn, graphs_key=False):
        def wrapped(*a, **kw):
            was = getattr(inside, "run", False)
            if not was:
                counts[phase_now()] += 1
                if graphs_key:
                    counts[f"{a[1][0]} graphs"] += 1
            inside.run = True
            try:
                return fn(*a, **kw)
            finally:
                inside.run = was
        return wrapped

    def phase(name, fn):
        def wrapped(self, *a, **kw):
            was, inside.phase = phase_now(), name
            try:
                return fn(self, *a, **kw)
            finally:
                inside.phase = was
        return wrapped

    E, B = engine_mod.PagedEngine, batch_mod.DeviceBatch
    saved = (B._run, engine_mod.sampler.sample, E._launch, E._collect, E._prefill_pass, E._serve)
    serve = E._serve

    def counted_serve(self):
        with Count():
            return serve(self)

    try:
        B._run = as_one(B._run, graphs_key=True)
        engine_mod.sampler.sample = as_one(engine_mod.sampler.sample)  # older engines sampled first tokens outside `_run`
        E._launch, E._collect = phase("decode", E._launch), phase("decode", E._collect)
        E._prefill_pass = phase("prefill", E._prefill_pass)
        E._serve = counted_serve
        yield counts, where
    finally:
        B._run, engine_mod.sampler.sample, E._launch, E._collect, E._prefill_pass, E._serve = saved


def agents_in_small(engine, episodes: int, turns: int, seed: int = 0) -> None:
    """`episodes` threads, each its own prompt, `turns` turns of up to 24 sampled tokens with an observation
    appended between turns."""
    rng = random.Random(seed)
    vocab = engine.pm.vocab

    def ids(n):
        return [rng.randrange(10, vocab) for _ in range(n)]

    starts = [ids(rng.randrange(60, 200)) for _ in range(episodes)]
    observations = [[ids(rng.randrange(10, 40)) for _ in range(turns)] for _ in range(episodes)]

    def episode(i):
        prompt = list(starts[i])
        for t in range(turns):
            s = engine.generate_tokens(prompt, [0], max_tokens=24, temperature=1.0, seed=i, stop_ids=[]).samples[0]
            prompt += s.ids + observations[i][t]

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(episodes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def together(engine, requests: int, seed: int = 0) -> None:
    """`requests` one-row requests of 24 tokens, all queued before the owner thread starts: they go in in
    one prefill pass, decode side by side and leave at the same step (one layout in all), so the counts
    do not depend on how the threads happen to be scheduled."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(10, engine.pm.vocab) for _ in range(rng.randrange(60, 200))] for _ in range(requests)]
    start = engine._ensure_thread
    engine._ensure_thread = lambda: None  # held back until every request is queued
    threads = [threading.Thread(target=engine.generate_tokens, args=(p, [0]),
                                kwargs={"max_tokens": 24, "temperature": 1.0, "seed": i, "stop_ids": []})
               for i, p in enumerate(prompts)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 4  # callers take a missing owner thread for a dead one after 5 s
        while engine._queue.qsize() < requests and time.monotonic() < deadline:
            time.sleep(0.01)
        if engine._queue.qsize() < requests:
            raise RuntimeError(f"{engine._queue.qsize()} of {requests} requests queued in 4 s")
    finally:
        del engine._ensure_thread
        start()
        for t in threads:
            t.join()


def host_calls(checkpoint, episodes: int = 32, turns: int = 3, detail: bool = False, workload: str = "agents") -> dict:
    """Host torch calls per decode step and per prefill pass on a CPU engine: `agents_in_small`, or
    `together` (`episodes` requests; `turns` unused)."""
    from mirl.engines.paged import engine as engine_mod

    with counting() as (counts, where):
        e = engine_mod.PagedEngine(checkpoint, device="cpu", dtype="float32", page_size=16, kv_tokens=1 << 16,
                                   prefill_tokens=512 if workload == "agents" else 8192)
        try:
            if workload == "agents":
                agents_in_small(e, episodes, turns)
            else:
                together(e, episodes)
            requests = e.stats["requests"]
        finally:
            e.close()
    decode, prefill = counts["decode graphs"], counts["prefill graphs"]
    out = {"episodes": episodes, "turns": turns, "decode_steps": decode, "prefill_passes": prefill,
           "requests": requests, "host_calls_per_decode_step": round(counts["decode"] / max(1, decode), 2),
           "host_calls_per_prefill_pass": round(counts["prefill"] / max(1, prefill), 2),
           "other_host_calls": counts["other"]}
    if detail:
        out["calls"] = dict(where.most_common())
    return out
