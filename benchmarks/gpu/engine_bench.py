"""python3 benchmarks/gpu/engine_bench.py [--sections checks,attention,precision,group,agents,contention,nano,handoff] [--quick]
       [--shapes smollm2-135m,qwen3-1.7b] [--busy 0,8] [--intervals 0.005,0.0005] [--ahead 0,1,2]

The continuous-batching engine (`mirl.engines.paged.PagedEngine`) on one GPU, randomly initialised
models of published shapes (`shapes.py`) in bf16 with a word-level tokenizer. Sections, in one call:

- checks: the Triton kernels against the torch reference (bf16 and float32); float32 greedy against
  `model.generate`; the stored logprobs against a float32 teacher-forced pass (float32 engine: the
  contract's 1e-4; bf16 engine: the difference measured); a row alone equals itself in a busy batch.
- attention: one decode step's attention, Triton paged kernel vs gathering the pages and SDPA over
  padded rows (the alternative), 64 rows x ~1,500 positions; achieved KV bandwidth.
- precision: float32 attention at the rate stage's shapes (SmolLM2, 8-64 rows of ~1,700-token contexts; a
  prefill pass of a few new tokens padded as the engine pads it), the kernels' dots in IEEE precision
  against three TF32 products (what float32 runs on a GPU): time and the error against the reference.
- group: N rows from one prompt in one call (the old group decoder's workload: 16 x 512 from 4,096).
- agents: N concurrent episodes (threads), each its own 500-2,000-token prompt, 4 turns of 128
  sampled tokens with a 100-400-token observation appended between turns; against one group call of
  the same rows (N x 512 from one 1,250-token prompt) and plain `model.generate` (N rows, the floor).
  Timed on a second pass (other prompts): the first captures the graphs of its batch sizes. `--ahead`:
  timed once per number of prefill passes the engine keeps out beside the decode steps (0: none).
- contention: `agents` (SmolLM2, N = 64) beside threads that run Python half the time, at the default
  and at a 0.5 ms thread switch interval: what the GIL costs the engine's owner thread.
- nano: nano-vllm's benchmark shape (256 sequences, inputs 100-1,024, outputs 100-1,024 tokens, end
  tokens ignored, seed 0, Qwen3-0.6B shape); the share of the HBM bound: the bytes every decode step
  must read (weights once, each live sequence's KV) at the copy rate measured in this call.
- handoff: learner -> engine weights in-process (`mirl.training.engine.EmbeddedEngine.update_weights`).

Prints a table per section last; full numbers in $OUT/engine_bench.json.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
import traceback
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import shapes  # noqa: E402
import torch  # noqa: E402

from mirl.engines.generator import teacher_forced_logprobs  # noqa: E402
from mirl.engines.paged import PagedEngine  # noqa: E402

RESULTS: dict = {}


def sync() -> None:
    torch.cuda.synchronize()


def max_diff(a, b) -> float:
    return max(abs(x - y) for x, y in zip(a, b)) if a else 0.0


def engine_for(name: str, work: Path, dtype: str = "bfloat16", **kw) -> PagedEngine:
    d = work / f"{name}-{dtype}"
    if not (d / "config.json").exists():
        shapes.checkpoint(name, d, getattr(torch, dtype))
    t0 = time.perf_counter()
    e = PagedEngine(d, **kw)
    e.bench_load_s = round(time.perf_counter() - t0, 2)
    return e


def done(e: PagedEngine) -> None:
    e.close()


def release() -> None:
    """The GPU memory of engines no longer referenced back to the driver (the next engine sizes its KV
    pool from what is free)."""
    import gc

    gc.collect()
    torch.cuda.empty_cache()


def random_ids(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(vocab - 2) for _ in range(n)]


def run_threads(e, threads):
    """Start `threads` together on engine `e`, wait for all; (wall seconds, the engine's stats delta)."""
    before = dict(e.stats)
    sync()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sync()
    return time.perf_counter() - t0, stats_delta(before, e.stats)


def stats_delta(before: dict, after: dict) -> dict:
    return {k: round(after[k] - before[k], 4) if isinstance(after[k], float) else after[k] - before[k]
            for k in ("decode_s", "prefill_s", "host_s", "steps", "row_steps", "prefill_tokens", "cached_tokens",
                      "prefill_passes", "steps_beside_passes", "gpu_decode_s", "gpu_prefill_s") if k in after}


# --- checks ----------------------------------------------------------------------------------------


def page_table(ctx: list[int], page: int, width: int, perm: torch.Tensor) -> torch.Tensor:
    """A page table per context (on the GPU), its pages taken in order from `perm`: none used twice."""
    table = torch.zeros(len(ctx), width, dtype=torch.int32)
    at = 0
    for b, c in enumerate(ctx):
        n = -(-c // page)
        table[b, :n] = perm[at:at + n]
        at += n
    return table.cuda()


def kernel_checks() -> list[dict]:
    from mirl.engines.paged import kernels
    from mirl.engines.paged.attention import prefill_tiles, reference

    rows = []
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        page, kvh, heads, d = 16, 8, 16, 128
        kv = torch.randn(2048 * page, 2, kvh, d, generator=g).to("cuda", dtype)
        ctx = [1, 17, 300, 1500, 4000, 64]
        table = page_table(ctx, page, 256, torch.randperm(2047, generator=g) + 1)
        q = torch.randn(len(ctx), heads, d, generator=g).to("cuda", dtype)
        ref = reference(q.float(), kv.float(), table, [(b, 1, c) for b, c in enumerate(ctx)], page, d ** -0.5)
        for splits in (1, 4):
            out = torch.full_like(q, float("nan"))
            scratch = kernels.DecodeScratch(8, heads, d, splits, "cuda") if splits > 1 else None
            kernels.decode_attention(q, kv, table, torch.tensor(ctx, device="cuda"), page, d ** -0.5, out, scratch)
            rows.append({"check": f"decode kernel, {splits} split(s)", "dtype": str(dtype)[6:],
                         "max_abs_diff": float((out.float() - ref).abs().max()),
                         "rel": float((out.float() - ref).norm() / ref.norm())})
        host, at = [], 0
        for ql, c in [(300, 300), (64, 1500), (1, 17), (700, 2000)]:
            host.append((at, ql, c))
            at += ql
        qp = torch.randn(at, heads, d, generator=g).to("cuda", dtype)
        ref = reference(qp.float(), kv.float(), table[:4], host, page, d ** -0.5)
        ts, tm = prefill_tiles(host, 64, "cuda")
        col = [torch.tensor([h[i] for h in host], dtype=torch.int32, device="cuda") for i in range(3)]
        out = kernels.prefill_attention(qp, kv, table[:4], *col, ts, tm, page, d ** -0.5)
        rows.append({"check": "prefill kernel", "dtype": str(dtype)[6:],
                     "max_abs_diff": float((out.float() - ref).abs().max()),
                     "rel": float((out.float() - ref).norm() / ref.norm())})
    return rows


def engine_checks(e: PagedEngine, name: str) -> dict:
    """Greedy against `model.generate`, logprobs against a float32 teacher-forced pass, a row alone
    against itself in a busy batch."""
    import copy

    dtype = str(e.pm.dtype).removeprefix("torch.")
    rng = random.Random(1)
    prompt = random_ids(rng, 300, e.pm.vocab)
    gen = e.generate_tokens(prompt, [0, 1, 2, 3], max_tokens=64, temperature=0.0)
    with torch.inference_mode():
        want = e.model.generate(torch.tensor([prompt], device=e.device), do_sample=False, max_new_tokens=64,
                                min_new_tokens=64, pad_token_id=0)[0, 300:].tolist()
    got = gen.samples[0].ids
    same = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), len(got))
    sampled = e.generate_tokens(prompt, [0, 1], max_tokens=64, temperature=0.8, seed=5).samples
    ref32 = e.model if dtype == "float32" else copy.deepcopy(e.model).float()
    lp = max(max_diff(teacher_forced_logprobs(ref32, prompt, s.ids, 0.8), s.logprobs) for s in sampled)
    lp_greedy = max_diff(teacher_forced_logprobs(ref32, prompt, got), gen.samples[0].logprobs)
    if dtype != "float32":
        own = max(max_diff(teacher_forced_logprobs(e.model, prompt, s.ids, 0.8), s.logprobs) for s in sampled)
        tf_gap = max_diff(teacher_forced_logprobs(e.model, prompt, sampled[0].ids, 0.8),
                          teacher_forced_logprobs(ref32, prompt, sampled[0].ids, 0.8))
        del ref32
    else:
        own, tf_gap = lp, 0.0
    # a row alone and in a busy batch: 24 other requests of other prompts decode beside it
    alone = e.generate_tokens(prompt, [7], max_tokens=48, temperature=1.0, seed=9).samples[0].ids
    others = [(random_ids(rng, rng.randrange(50, 900), e.pm.vocab), [0, 1], 48, 1.0, 1.0, 100 + i) for i in range(24)]
    threads = [threading.Thread(target=e.generate_tokens, args=a) for a in others]
    for t in threads:
        t.start()
    inside = e.generate_tokens(prompt, [7], max_tokens=48, temperature=1.0, seed=9).samples[0].ids
    for t in threads:
        t.join()
    row = {"check": f"engine {name}", "dtype": dtype, "compiled": e.compiled, "greedy_same_as_generate": f"{same}/64",
           "rows_agree": all(s.ids == got for s in gen.samples), "lp_vs_fp32_teacher": lp,
           "lp_greedy_vs_fp32_teacher": lp_greedy, "lp_vs_own_dtype_teacher": own, "teacher_vs_fp32": tf_gap,
           "alone_eq_busy": alone == inside,
           "alone_eq_busy_prefix": next((i for i, (a, b) in enumerate(zip(alone, inside)) if a != b), 48),
           "max_rows_seen": e.stats["max_rows_seen"], "compile_frames": _frames()}
    print(row, flush=True)
    return row


def _frames() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"].get("unique_graphs", 0))


# --- attention: Triton vs gather + SDPA --------------------------------------------------------------


def torch_padded_decode(q, kv, table, ctx_host, page, scale):
    """The alternative: gather every row's positions (padded to the longest) and one SDPA call."""
    import torch.nn.functional as F

    rows, heads, d = q.shape
    kvh = kv.shape[2]
    longest = max(ctx_host)
    pos = torch.arange(longest, device=q.device)
    slots = table[:, pos // page].long() * page + pos % page  # [rows, longest]
    both = kv[slots.view(-1)].view(rows, longest, 2, kvh, d)
    k = both[:, :, 0].transpose(1, 2).repeat_interleave(heads // kvh, 1)
    v = both[:, :, 1].transpose(1, 2).repeat_interleave(heads // kvh, 1)
    mask = pos[None, :] < torch.tensor(ctx_host, device=q.device)[:, None]
    return F.scaled_dot_product_attention(q[:, :, None], k, v, attn_mask=mask[:, None, None], scale=scale)[:, :, 0]


def attention_case(name: str, kvh: int, heads: int, d: int, batch: int, mean_ctx: int, ceil: dict) -> dict:
    from triton.testing import do_bench

    from mirl.engines.paged import kernels

    page = 16
    rng = random.Random(0)
    ctx = [max(1, int(rng.uniform(0.5, 1.5) * mean_ctx)) for _ in range(batch)]
    pages = sum(-(-c // page) for c in ctx) + 1
    kv = torch.randn(pages * page, 2, kvh, d, device="cuda", dtype=torch.bfloat16)
    width = max(-(-c // page) for c in ctx)
    perm = torch.randperm(pages - 1, device="cuda") + 1
    table = torch.zeros(batch, width, dtype=torch.int32, device="cuda")
    at = 0
    for b, c in enumerate(ctx):
        n = -(-c // page)
        table[b, :n] = perm[at:at + n]
        at += n
    q = torch.randn(batch, heads, d, device="cuda", dtype=torch.bfloat16)
    ctx_t = torch.tensor(ctx, device="cuda")
    out = torch.empty_like(q)
    splits = kernels.decode_splits(batch, kvh, max(ctx), torch.cuda.get_device_properties(0).multi_processor_count)
    scratch = kernels.DecodeScratch(batch, heads, d, splits, "cuda") if splits > 1 else None
    tri = do_bench(lambda: kernels.decode_attention(q, kv, table, ctx_t, page, d ** -0.5, out, scratch),
                   warmup=50, rep=300, return_mode="median")
    sdpa = do_bench(lambda: torch_padded_decode(q, kv, table, ctx, page, d ** -0.5), warmup=20, rep=200,
                    return_mode="median")
    ref = torch_padded_decode(q, kv, table, ctx, page, d ** -0.5)
    kernels.decode_attention(q, kv, table, ctx_t, page, d ** -0.5, out, scratch)
    kv_bytes = sum(ctx) * kvh * d * 2 * 2
    return {"shape": name, "rows": batch, "mean_ctx": mean_ctx, "splits": splits,
            "triton_us": round(tri * 1e3, 1), "gather_sdpa_us": round(sdpa * 1e3, 1), "speedup": round(sdpa / tri, 1),
            "triton_kv_gbps": round(kv_bytes / tri / 1e6, 0),
            "pct_of_copy": round(100 * kv_bytes / tri / 1e6 / ceil["copy_gbps"], 1),
            "max_abs_diff": float((out.float() - ref.float()).abs().max())}


def section_attention(ceil: dict) -> list[dict]:
    rows = []
    for name, kvh, heads, d in (("smollm2-135m", 3, 9, 64), ("qwen3-1.7b", 8, 16, 128)):
        for batch, mean_ctx in ((64, 1500), (256, 800), (16, 4000)):
            rows.append(attention_case(name, kvh, heads, d, batch, mean_ctx, ceil))
            print(rows[-1], flush=True)
            torch.cuda.empty_cache()
    return rows


def section_precision() -> list[dict]:
    """Float32 attention as the rate stage runs it (SmolLM2 shape, ~1,700-token contexts): the kernels'
    dots in IEEE precision (CUDA cores) against three TF32 products (tensor cores), time and error
    against the float32 reference."""
    from triton.testing import do_bench

    from mirl.engines.paged import kernels
    from mirl.engines.paged.attention import prefill_tiles, reference

    page, kvh, heads, d = 16, 3, 9, 64
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    rows = []
    for batch in (8, 43, 64):
        ctx = [int(rng.uniform(1200, 2200)) for _ in range(batch)]
        width = max(-(-c // page) for c in ctx)
        pages = sum(-(-c // page) for c in ctx) + 1
        kv = torch.randn(pages * page, 2, kvh, d, generator=g).to("cuda")
        table = page_table(ctx, page, width, torch.randperm(pages - 1, generator=g) + 1)
        q = torch.randn(batch, heads, d, generator=g).to("cuda")
        ctx_t = torch.tensor(ctx, device="cuda")
        ref = reference(q, kv, table, [(b, 1, c) for b, c in enumerate(ctx)], page, d ** -0.5)
        splits = kernels.decode_splits(batch, kvh, max(ctx), torch.cuda.get_device_properties(0).multi_processor_count)
        scratch = kernels.DecodeScratch(batch, heads, d, splits, "cuda") if splits > 1 else None
        out = torch.empty_like(q)
        row = {"kernel": "decode", "rows": batch, "splits": splits}
        for prec in ("ieee", "tf32x3"):
            step = partial(kernels.decode_attention, q, kv, table, ctx_t, page, d ** -0.5, out, scratch, prec=prec)
            row[f"{prec}_us"] = round(do_bench(step, warmup=20, rep=200, return_mode="median") * 1e3, 1)
            step()
            row[f"{prec}_max_abs_diff"] = float((out - ref).abs().max())
        # a pass as the engine pads it: 2-4 sequences of a few new tokens each, 64 query rows, 64 + 1 spare tiles
        seqs = [(int(rng.uniform(4, 16)), ctx[i]) for i in range(min(4, batch))]  # <= 64 new tokens
        host, at = [], 0
        for ql, c in seqs:
            host.append((at, ql, c))
            at += ql
        qp = torch.randn(64, heads, d, generator=g).to("cuda")
        ts, tm = prefill_tiles(host, 64, "cuda")
        pad = 64 // 64 + 64 + 1 - ts.shape[0]
        ts = torch.cat([ts, torch.full((pad,), len(host), dtype=ts.dtype, device="cuda")])
        tm = torch.cat([tm, torch.zeros(pad, dtype=tm.dtype, device="cuda")])
        col = [torch.tensor([h[i] for h in host] + [0], dtype=torch.int32, device="cuda") for i in range(3)]
        pref = reference(qp[:at], kv, table[:len(host)], host, page, d ** -0.5)
        prow = {"kernel": "prefill", "sequences": len(host), "new_tokens": at, "tiles": int(ts.shape[0])}
        for prec in ("ieee", "tf32x3"):
            run = partial(kernels.prefill_attention, qp, kv, table[:len(host) + 1], *col, ts, tm, page, d ** -0.5,
                          prec=prec)
            prow[f"{prec}_us"] = round(do_bench(run, warmup=20, rep=200, return_mode="median") * 1e3, 1)
            prow[f"{prec}_max_abs_diff"] = float((run()[:at] - pref).abs().max())
        for r in (row, prow):
            r["speedup"] = round(r["ieee_us"] / r["tf32x3_us"], 2)
            print(r, flush=True)
            rows.append(r)
    return rows


# --- workloads -------------------------------------------------------------------------------------


def group_call(e: PagedEngine, rows: int, prompt_len: int, new: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    prompt = random_ids(rng, prompt_len, e.pm.vocab)
    before = dict(e.stats)
    sync()
    t0 = time.perf_counter()
    gen = e.generate_tokens(prompt, list(range(rows)), max_tokens=new, temperature=1.0, seed=seed,
                            stop_ids=[])
    sync()
    wall = time.perf_counter() - t0
    n = sum(len(s.ids) for s in gen.samples)
    d = stats_delta(before, e.stats)
    return {"seconds": round(wall, 3), "tokens": n, "tokens_per_s": round(n / wall, 1),
            "step_ms": round(1e3 * d["decode_s"] / max(1, d["steps"]), 3), **d}


def agents(e: PagedEngine, n: int, seed: int = 0, turns: int = 4, new: int = 128) -> dict:
    rng = random.Random(seed)
    vocab = e.pm.vocab
    starts = [random_ids(rng, rng.randrange(500, 2001), vocab) for _ in range(n)]
    observations = [[random_ids(rng, rng.randrange(100, 401), vocab) for _ in range(turns)] for _ in range(n)]
    sampled = [0] * n
    errors: list = []

    def episode(i):
        try:
            ids = list(starts[i])
            for t in range(turns):
                s = e.generate_tokens(ids, [0], max_tokens=new, temperature=1.0, seed=seed * 1000 + i,
                                      stop_ids=[]).samples[0]
                sampled[i] += len(s.ids)
                ids += s.ids + observations[i][t]
        except Exception as ex:  # noqa: BLE001 - reported
            errors.append(repr(ex))

    wall, d = run_threads(e, [threading.Thread(target=episode, args=(i,)) for i in range(n)])
    return {"seconds": round(wall, 3), "tokens": sum(sampled), "tokens_per_s": round(sum(sampled) / wall, 1),
            "errors": errors[:3], "step_ms": round(1e3 * d["decode_s"] / max(1, d["steps"]), 3),
            "mean_rows": round(d["row_steps"] / max(1, d["steps"]), 1), **d}


def contention_rows(e: PagedEngine, name: str, n: int = 64, busy: tuple = (0, 8),
                    intervals: tuple = (0.005, 0.0005)) -> list[dict]:
    """`agents` at N episodes while B other threads run Python half the time (5 ms on, 5 ms off: what
    episode threads do between model calls: templates, tokenizing, reading sandbox output), at the
    interpreter's default 5 ms thread switch interval and at 0.5 ms. Every torch call of the engine's
    owner thread releases the GIL and must win it back; with busy threads each return can wait up to
    the switch interval (a training step on an H200 saw 58 ms per prefill pass of ~300 tokens and 8.5 ms
    of host time per decode step, against ~2-3 ms and ~0.3 ms in `agents`)."""
    agents(e, n, seed=99)  # first: the prefill sizes' and decode buckets' captures (a cold run's passes took 60 ms)
    out = []
    for b in busy:
        for interval in intervals:
            stop = threading.Event()

            def spin(stop=stop):
                x = 0
                while not stop.is_set():
                    t = time.perf_counter()
                    while time.perf_counter() - t < 0.005:
                        x += 1
                    time.sleep(0.005)

            old = sys.getswitchinterval()
            sys.setswitchinterval(interval)
            spinners = [threading.Thread(target=spin, daemon=True) for _ in range(b)]
            for t in spinners:
                t.start()
            try:
                a = agents(e, n, seed=100 + len(out))  # new prompts each run: no prefix-cache hits across runs
            finally:
                stop.set()
                for t in spinners:
                    t.join()
                sys.setswitchinterval(old)
            out.append({"shape": name, "episodes": n, "busy_threads": b, "switch_ms": interval * 1e3,
                        "tokens_per_s": a["tokens_per_s"], "seconds": a["seconds"], "step_ms": a["step_ms"],
                        "host_ms_per_step": round(1e3 * a["host_s"] / max(1, a["steps"]), 3),
                        "prefill_ms_per_pass": round(1e3 * a["prefill_s"] / max(1, a["prefill_passes"]), 2),
                        "prefill_passes": a["prefill_passes"], "prefill_tokens": a["prefill_tokens"],
                        "errors": a["errors"]})
            print(out[-1], flush=True)
    return out


def plain_generate(model, rows: int, prompt_len: int, new: int) -> dict:
    rng = random.Random(3)
    ids = torch.tensor([random_ids(rng, prompt_len, model.config.vocab_size)] * rows, device=model.device)
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0, attention_mask=torch.ones_like(ids))
    sync()
    t0 = time.perf_counter()
    with torch.inference_mode():
        model.generate(ids, max_new_tokens=new, min_new_tokens=new, **kw)
    sync()
    wall = time.perf_counter() - t0
    return {"seconds": round(wall, 3), "tokens_per_s": round(rows * new / wall, 1), "new": new}


def group_rows(e: PagedEngine, name: str) -> dict:
    cold = group_call(e, 16, 4096, 512, seed=0)
    warm = [group_call(e, 16, 4096, 512, seed=s) for s in (1, 2)]
    best = max(warm, key=lambda r: r["tokens_per_s"])
    row = {"shape": name, "rows": 16, "prompt": 4096, "new": 512, "cold_tokens_per_s": cold["tokens_per_s"], **best}
    print(row, flush=True)
    return row


def agents_rows(e: PagedEngine, name: str, sizes, ahead=(None,)) -> list[dict]:
    """Per N, the agents workload warm, once per `prefill_ahead` in `ahead` (None: the engine's default),
    side by side on the same engine, against one group call of N rows and plain `generate`."""
    out = []
    default = getattr(e, "prefill_ahead", None)  # (older engines: none)
    for n in sizes:
        # a first pass captures the decode and prefill graphs of this many rows (and compiles): timed
        # alone, it reads as a slower engine (2026-12-06: N = 64 at 10,202 cold against 17,926 warm)
        cold = agents(e, n, seed=1)
        runs = []
        for v in ahead:
            if v is not None:
                e.prefill_ahead = v
            e.update_weights({})  # the same prompts each time: none of them in the prefix cache
            runs.append((getattr(e, "prefill_ahead", None), agents(e, n)))
        if default is not None:
            e.prefill_ahead = default
        g = group_call(e, n, 1250, 512, seed=7)
        plain = plain_generate(e.model, min(n, 64), 1250, 64)  # 256 rows of 1,250 tokens: no memory for its logits
        for v, a in runs:
            out.append({"shape": name, "episodes": n, "prefill_ahead": v, "agents_tokens_per_s": a["tokens_per_s"],
                        "cold_tokens_per_s": cold["tokens_per_s"],
                        "group_tokens_per_s": g["tokens_per_s"],
                        "ratio_to_group": round(a["tokens_per_s"] / g["tokens_per_s"], 2),
                        "plain_tokens_per_s": plain["tokens_per_s"],
                        "ratio_to_plain": round(a["tokens_per_s"] / plain["tokens_per_s"], 1),
                        "agents_step_ms": a["step_ms"], "group_step_ms": g["step_ms"], "mean_rows": a["mean_rows"],
                        "agents_s": a["seconds"], "decode_s": a["decode_s"], "prefill_s": a["prefill_s"],
                        "host_s": a["host_s"], "prefill_tokens": a["prefill_tokens"],
                        "steps": a["steps"], "steps_beside_passes": a.get("steps_beside_passes"),
                        "gpu_decode_s": a.get("gpu_decode_s"), "gpu_prefill_s": a.get("gpu_prefill_s"),
                        "cached_tokens": a["cached_tokens"], "errors": a["errors"]})
            print(out[-1], flush=True)
    return out


def prefill_rows(e: PagedEngine, name: str) -> list[dict]:
    """Prompts alone (max_tokens 1): the time of a prefill pass of n tokens, and the GPU kernels of one
    pass of 4,096 (torch.profiler; CUDA activity is traced for every thread of the process)."""
    rng = random.Random(11)
    out = []
    for n in (256, 1024, 4096):
        before = dict(e.stats)
        sync()
        t0 = time.perf_counter()
        for _ in range(3):
            e.generate_tokens(random_ids(rng, n, e.pm.vocab), [0], max_tokens=1)
        wall = (time.perf_counter() - t0) / 3
        d = stats_delta(before, e.stats)
        out.append({"shape": name, "prompt": n, "call_ms": round(1e3 * wall, 2),
                    "pass_ms": round(1e3 * d["prefill_s"] / max(1, d["prefill_passes"]), 2),
                    "tokens_per_s": round(n / wall, 0), "passes": d["prefill_passes"]})
        print(out[-1], flush=True)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        e.generate_tokens(random_ids(rng, 4096, e.pm.vocab), [0], max_tokens=1)
        sync()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=60)
    print(table, flush=True)
    shapes.write_text(f"prefill_profile_{name}", table)
    return out


def handoff_row(e: PagedEngine, name: str) -> dict:
    from mirl.training.engine import EmbeddedEngine
    from mirl.training.learner import LearnerConfig

    trainer = EmbeddedEngine(e, LearnerConfig())
    times = [trainer.update_weights() for _ in range(3)]
    after = e.generate_tokens(list(range(10, 100)), [0], max_tokens=4)
    row = {"shape": name, "handoff_s": [round(t, 4) for t in times], "weights_version": e.weights_version,
           "cached_after": after.cached_tokens}
    print(row, flush=True)
    del trainer
    return row


def section_nano(work: Path, ceil: dict) -> list[dict]:
    e = engine_for("qwen3-0.6b", work, kv_memory=0.5)
    rng = random.Random(0)
    reqs = [(random_ids(rng, rng.randint(100, 1024), e.pm.vocab), rng.randint(100, 1024)) for _ in range(256)]
    e.generate_tokens(list(range(10, 300)), [0, 1], max_tokens=8)  # warm-up: compile
    for b in (8, 64, 256):  # capture the buckets the run passes through most
        e.generate_tokens(list(range(10, 40)), list(range(b)), max_tokens=3)
    lens: list = []

    def one(p, n):
        lens.append(len(e.generate_tokens(p, [0], max_tokens=n, temperature=0.6, stop_ids=[]).samples[0].ids))

    wall, d = run_threads(e, [threading.Thread(target=one, args=r) for r in reqs])
    cfg = e.model.config
    m = shapes.dims(cfg)
    weights = (m["body_params"] + m["head_params"]) * 2
    kv_token = e.pm.kv_bytes_per_token()
    steps = max(n for _, n in reqs)
    total = 0
    for t in range(steps):  # every sequence decodes from t = 0; the step reads what is live then
        live = [(len(p), n) for p, n in reqs if n > t + 1]
        if live:
            total += weights + kv_token * sum(lp + t for lp, _ in live)
    bound_s = total / (ceil["copy_gbps"] * 1e9)
    tokens = sum(n for _, n in reqs)
    row = {"shape": "qwen3-0.6b", "sequences": 256, "tokens": tokens, "seconds": round(wall, 2),
           "tokens_per_s": round(tokens / wall, 1), "bound_s": round(bound_s, 2),
           "bound_tokens_per_s": round(tokens / bound_s, 1), "pct_of_bound": round(100 * bound_s / wall, 1),
           "decode_pct_of_bound": round(100 * bound_s / max(1e-9, d["decode_s"]), 1), **d,
           "step_ms": round(1e3 * d["decode_s"] / max(1, d["steps"]), 3), "ok": lens and min(lens) >= 100}
    print(row, flush=True)
    done(e)
    return [row]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sections", default="checks,attention,group,agents,prefill,nano,handoff")
    ap.add_argument("--quick", action="store_true", help="fewer sizes (a smoke run)")
    ap.add_argument("--shapes", default="smollm2-135m,qwen3-1.7b", help="model shapes of the engine sections")
    ap.add_argument("--busy", default="0,8", help="contention: numbers of busy Python threads beside the episodes")
    ap.add_argument("--intervals", default="0.005,0.0005", help="contention: thread switch intervals (s)")
    ap.add_argument("--prefill-tokens", type=int, default=0, help="the bf16 engine's prefill pass size (0: its default)")
    ap.add_argument("--sizes", default="", help="agents: numbers of episodes (default 16,64,256; --quick 16,64)")
    ap.add_argument("--ahead", default="", help="agents: prefill passes ahead to compare, e.g. 0,1,2 (default: "
                    "the engine's)")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    RESULTS["env"] = shapes.environment()
    RESULTS["ceilings"] = ceil = shapes.ceilings()
    print("ceilings", ceil, flush=True)
    sections = args.sections.split(",")

    def run(section: str, fn, *a):
        t0 = time.perf_counter()
        try:
            got = fn(*a)
            RESULTS.setdefault(section, []).extend(got if isinstance(got, list) else [got])
        except Exception as e:  # noqa: BLE001 - report and go on
            traceback.print_exc()
            RESULTS.setdefault(section, []).append({"error": repr(e)[:500], "where": str(a[1:2])})
        RESULTS.setdefault("section_s", {}).setdefault(section, 0.0)
        RESULTS["section_s"][section] += round(time.perf_counter() - t0, 1)
        shapes.write_out("engine_bench", RESULTS)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "checks" in sections:
            run("checks", kernel_checks)
        if "attention" in sections:
            run("attention", section_attention, ceil)
        if "precision" in sections:
            run("precision", section_precision)
        for name in args.shapes.split(","):
            if set(sections) <= {"contention"} and name != "smollm2-135m":
                continue
            if "checks" in sections:  # float32: graphs, no compile (the contract's 1e-4)
                e = engine_for(name, work, "float32", compiled=False, kv_memory=0.2)
                run("checks", engine_checks, e, name)
                done(e)
                e = None
                release()
            t0 = time.perf_counter()
            e = engine_for(name, work, kv_memory=0.5, prefill_tokens=args.prefill_tokens or None)
            e.generate_tokens(list(range(10, 600)), [0, 1], max_tokens=8)  # compile, capture the first buckets
            RESULTS.setdefault("warmup_s", {})[name] = round(time.perf_counter() - t0, 1)
            if "checks" in sections:
                run("checks", engine_checks, e, name)
            if "group" in sections:
                run("group", group_rows, e, name)
            if "agents" in sections:
                sizes = tuple(int(n) for n in args.sizes.split(",")) if args.sizes else (16, 64) if args.quick \
                    else (16, 64, 256)
                run("agents", agents_rows, e, name, sizes,
                    tuple(int(v) for v in args.ahead.split(",")) if args.ahead else (None,))
            if "prefill" in sections:
                run("prefill", prefill_rows, e, name)
            if "contention" in sections and name == "smollm2-135m":
                run("contention", contention_rows, e, name, 64, tuple(int(b) for b in args.busy.split(",")),
                    tuple(float(i) for i in args.intervals.split(",")))
            if "handoff" in sections:
                run("handoff", handoff_row, e, name)
            RESULTS.setdefault("kv_capacity", {})[name] = e.kv_capacity
            RESULTS.setdefault("graphs", {})[name] = e.stats["graphs_captured"]
            done(e)
            e = None
            release()
        if "nano" in sections:
            run("nano", section_nano, work, ceil)
    print(f"\nceilings: copy {ceil['copy_gbps']} GB/s, matmul {ceil['matmul_tflops']} TFLOP/s; {RESULTS['env']}")
    print("section seconds", RESULTS["section_s"])
    for section in sections:
        rows = RESULTS.get(section) or []
        if rows:
            cols = list(dict.fromkeys(k for r in rows for k in r if not isinstance(r[k], (list, dict))))
            print(f"\n## {section}\n" + shapes.table(rows, cols))


if __name__ == "__main__":
    main()
