"""python benchmarks/gpu/zero_bench.py [--gpus 1,2] [--shape qwen3-4b] [--stage 2] [--seqs 4] [--length 8192]

Tokens/s and MFU of the DeepSpeed ZeRO learner (`mirl.training.scale.zero_learner`) on 1 and N GPUs,
and the scaling efficiency: tokens/s on N GPUs over N times tokens/s on one. Weak scaling: every
rank gets `--seqs` sequences of `--length` tokens per step (MiRL-like loss masks, as in
learner_bench.py), so the global batch grows with N. Randomly initialised weights of the published
shape (shapes.py), DeepSpeed's bf16 mode, torch AdamW (no compiled DeepSpeed ops), one optimizer
step per batch; the first step is warm-up.

For each GPU count it launches itself under torchrun (`--worker`); rank 0 measures the matmul
ceiling once (or takes --ceiling-tflops) and writes its numbers to $OUT/zero_bench_<n>.json; the
summary goes to $OUT/zero_bench.json. MFU = model FLOPs (shapes.train_flops) / time / (N x ceiling).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import shapes  # noqa: E402


def worker(args) -> None:
    import torch
    from learner_bench import mirl_example

    from mirl.training.learner import LearnerConfig
    from mirl.training.scale.zero_learner import ZeroLearner

    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = shapes.config(args.shape)
    world = int(os.environ.get("WORLD_SIZE", 1))
    rng = random.Random(0)
    exs = [mirl_example(rng, cfg.vocab_size, args.length) for _ in range(args.seqs * world)]
    adv = [rng.choice([-1.0, 1.0]) * rng.random() for _ in exs]
    c = LearnerConfig(lr=1e-6, micro_batch_tokens=args.length, head_chunk=4096,
                      gradient_checkpointing=args.ckpt, compile_layers=False)
    model = shapes.build(args.shape, f"cuda:{local}", torch.float32)
    learner = ZeroLearner(model, c, stage=args.stage, bf16=True)
    ceiling = args.ceiling_tflops
    if learner.rank == 0 and not ceiling:
        ceiling = shapes.ceilings()["matmul_tflops"]
    learner.train_step(exs[:world], adv[:world])  # warm-up: kernels, optimizer state
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.repeats):
        torch.distributed.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        stats = learner.train_step(exs, adv)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if learner.rank != 0:
        return
    tokens = sum(len(ex.ids) for ex in exs)
    flops = sum(shapes.train_flops(cfg, len(ex.ids), ex.mask[1:].count(1)) for ex in exs)
    best = min(times)
    row = {"gpus": world, "shape": args.shape, "stage": args.stage, "seqs_per_gpu": args.seqs, "length": args.length,
           "seconds": [round(t, 3) for t in times], "tokens": tokens, "tokens_per_s": round(tokens / best),
           "achieved_tflops": round(flops / best / 1e12, 1), "ceiling_tflops_per_gpu": ceiling,
           "mfu_pct": round(100 * flops / best / 1e12 / (world * ceiling), 1),
           "peak_gib_rank0": round(torch.cuda.max_memory_allocated() / 2**30, 1), "loss": stats["loss"],
           "grad_norm": stats["grad_norm"], "env": shapes.environment()}
    shapes.write_out(f"zero_bench_{world}", row)
    print(json.dumps(row), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="1,2", help="GPU counts to run, e.g. 1,2 or 1,2,4,8")
    ap.add_argument("--shape", default="qwen3-4b")
    ap.add_argument("--stage", type=int, default=2)
    ap.add_argument("--seqs", type=int, default=4, help="sequences per GPU per step")
    ap.add_argument("--length", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--ckpt", action="store_true", help="gradient checkpointing")
    ap.add_argument("--ceiling-tflops", type=float, default=0.0, help="skip measuring the bf16 matmul ceiling")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    out = Path(os.environ.get("OUT", "."))
    rows = []
    for n in [int(x) for x in args.gpus.split(",")]:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(n), __file__,
               "--worker", "--shape", args.shape, "--stage", str(args.stage), "--seqs", str(args.seqs),
               "--length", str(args.length), "--repeats", str(args.repeats),
               "--ceiling-tflops", str(args.ceiling_tflops)] + (["--ckpt"] if args.ckpt else [])
        print("$", " ".join(cmd), flush=True)
        if subprocess.run(cmd).returncode != 0:
            rows.append({"gpus": n, "error": "the run failed (see its output above)"})
            continue
        row = json.loads((out / f"zero_bench_{n}.json").read_text())
        rows.append(row)
        if not args.ceiling_tflops:  # measured once, by the first run
            args.ceiling_tflops = row["ceiling_tflops_per_gpu"]
    one = next((r for r in rows if r.get("gpus") == 1 and "tokens_per_s" in r), None)
    for r in rows:
        if one and "tokens_per_s" in r:
            r["scaling_efficiency"] = round(r["tokens_per_s"] / (r["gpus"] * one["tokens_per_s"]), 3)
    shapes.write_out("zero_bench", {"args": vars(args), "rows": rows})
    print(shapes.table(rows, ["gpus", "shape", "stage", "tokens_per_s", "achieved_tflops", "mfu_pct",
                              "scaling_efficiency", "peak_gib_rank0", "error"]))


if __name__ == "__main__":
    main()
