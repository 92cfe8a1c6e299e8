"""python benchmarks/gpu/decode_profile.py [--shapes qwen3-1.7b,smollm2-135m] [--rows 16] [--prefix 4096]

Where a group decode step's time goes: replays of one captured step (suffix block 128) timed with
events, with and without the attention half compiled, then a profile of the replays: kernels per
step, their summed time against the step time (the rest is gaps between kernels), the top kernels.
Full numbers: $OUT/decode_profile.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import shapes  # noqa: E402

from mirl.llm.group_decode import GroupDecoder  # noqa: E402


def profile(model, rows: int, prefix: int, compile_attention: bool) -> dict:
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    dec = GroupDecoder(model, compile_attention=compile_attention)
    vocab = model.config.vocab_size
    with torch.inference_mode():
        ids = torch.randint(0, vocab, (1, prefix), device="cuda")
        out = model(input_ids=ids, use_cache=True)
        cache = getattr(out, "past_key_values", None) or out.cache
        kv = [(layer.keys, layer.values) for layer in cache.layers]
        dec.generate(kv, out.logits[:, -1], list(range(rows)), 512, temperature=1.0)  # builds, captures
        plan = next(iter(dec._plans.values()))
        graph = plan.graphs[(128, False, 1.0)]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(5):
            plan.t.zero_()
            start.record()
            for _ in range(100):
                graph.replay()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 100)
        plan.t.zero_()
        n = 20
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                graph.replay()
            torch.cuda.synchronize()
    evs = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    total_us = sum(e.device_time_total for e in evs) / n
    count = sum(e.count for e in evs) / n
    top = sorted(evs, key=lambda e: -e.device_time_total)[:12]
    return {"compile_attention": compile_attention, "step_ms": round(sorted(times)[2], 4), "kernels_per_step": count,
            "kernel_ms_per_step": round(total_us / 1e3, 4),
            "top": [{"name": e.key[:90], "us_per_step": round(e.device_time_total / n, 1), "calls": e.count / n}
                    for e in top]}


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="qwen3-1.7b,smollm2-135m")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--prefix", type=int, default=4096)
    args = ap.parse_args()
    ceil = shapes.ceilings()
    res = []
    for name in args.shapes.split(","):
        model = shapes.build(name, "cuda", torch.bfloat16).eval()
        for ca in (False, True):
            r = {"shape": name, **profile(model, args.rows, args.prefix, ca)}
            b = shapes.decode_bytes(model.config, args.rows, args.prefix, 128)
            r["bound_ms"] = round(b["per_step"] / (ceil["copy_gbps"] * 1e9) * 1e3, 4)
            res.append(r)
            print(r, flush=True)
        del model
        torch.cuda.empty_cache()
    shapes.write_out("decode_profile", {"ceilings": ceil, "rows": res})
    for r in res:
        print(f"\n{r['shape']} compile_attention={r['compile_attention']}: step {r['step_ms']} ms, "
              f"{r['kernels_per_step']:.0f} kernels, {r['kernel_ms_per_step']} ms in kernels, bound {r['bound_ms']} ms")
        for t in r["top"][:8]:
            print(f"  {t['us_per_step']:8.1f} us  x{t['calls']:.0f}  {t['name']}")


if __name__ == "__main__":
    main()
