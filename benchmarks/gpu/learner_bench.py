"""python benchmarks/gpu/learner_bench.py [--shapes qwen3-1.7b,qwen3-4b] [--seqs 8] [--length 8192]

The DPPO `Learner.train_step` on one GPU, randomly initialised Qwen3-1.7B / Qwen3-4B shapes, float32
weights under bf16 autocast (what `make_learner` builds), sequences of `--length` tokens with loss
masks like MiRL's (a masked prefix, then policy turns trained and tool outputs masked), one
sequence per micro-batch, the optimizer step included once per `--seqs` sequences.

First the two ceilings (bf16 matmul, device copy); then per shape a check that the chunked head
gives the plain head's loss and gradients (bf16 tolerance), then variants timed:
  plain    head in one piece, unfused AdamW (the learner before the GPU work)
  chunked  chunked LM head, fused AdamW
  ckpt     chunked + gradient checkpointing
  cudnn    chunked, SDPA's cuDNN attention kernel first
  compiled chunked, each decoder layer through torch.compile (fuses norms, rotary, activations;
           the learner's default on a GPU)
  compiled+ckpt  compiled + gradient checkpointing
Prints tokens/s, MFU (model FLOPs of `shapes.train_flops` over the measured matmul ceiling) and
peak memory; full numbers go to $OUT/learner.json.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import shapes  # noqa: E402

from mirl.training.learner import Example, Learner, LearnerConfig, batch_inputs, token_logprobs  # noqa: E402


def mirl_example(rng: random.Random, vocab: int, length: int) -> Example:
    """Random ids; mask 0 over a prefix of 1-2k tokens (task and misbehavior prefix), then policy
    turns (100-600 tokens, trained) alternating with tool outputs (100-900 tokens, masked)."""
    ids = [rng.randrange(vocab) for _ in range(length)]
    mask = [0] * rng.randint(1024, 2048)
    policy = True
    while len(mask) < length:
        n = rng.randint(100, 600) if policy else rng.randint(100, 900)
        mask += [int(policy)] * n
        policy = not policy
    mask = mask[:length]
    return Example(ids, mask, [(-0.5 - rng.random()) if m else 0.0 for m in mask])


def check_head(model, ex: Example, temperature: float = 1.0) -> dict:
    """Loss and gradients of one sequence, plain head against chunked (both under bf16 autocast)."""
    import torch

    inputs = batch_inputs([ex], "cuda")
    res = []
    for chunk in (0, 0, 1024):  # plain twice: the run-to-run spread of the bf16 kernels
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lp, _ = token_logprobs(model, inputs, temperature, head_chunk=chunk)
        w = torch.linspace(-1, 1, len(lp), device="cuda")
        loss = (lp * w).sum() / len(lp)
        loss.backward()
        loss = loss.detach()
        g = torch.cat([p.grad.flatten().float() for p in model.parameters() if p.grad is not None])
        res.append((float(loss), lp.detach(), g))
    model.zero_grad(set_to_none=True)
    (l0, lp0, g0), (_, _, ga), (l1, lp1, g1) = res
    out = {"loss_plain": l0, "loss_chunked": l1, "lp_max_abs_diff": float((lp0 - lp1).abs().max()),
           "grad_rel_diff": float((g0 - g1).norm() / g0.norm()),
           "grad_rel_diff_plain_twice": float((g0 - ga).norm() / g0.norm())}
    del res, g0, g1, ga
    torch.cuda.empty_cache()
    return out


def run_variant(name: str, model, cfg, exs, adv, variant: str, repeats: int) -> dict:
    import contextlib

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    c = LearnerConfig(lr=1e-6, micro_batch_tokens=len(exs[0].ids), head_chunk=0 if variant == "plain" else 4096,
                      gradient_checkpointing=variant.endswith("ckpt"), compile_layers=variant.startswith("compiled"))
    if not variant.endswith("ckpt") and getattr(model, "is_gradient_checkpointing", False):
        model.gradient_checkpointing_disable()
    learner = Learner(model, c)
    if variant == "plain":  # the optimizer the learner had before: AdamW's per-tensor loop
        learner.optimizer = torch.optim.AdamW(model.parameters(), lr=c.lr, betas=c.betas,
                                              weight_decay=c.weight_decay, foreach=False)
    row = {"shape": name, "variant": variant}
    ctx = contextlib.nullcontext
    if variant == "cudnn":
        def ctx():
            return sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION], set_priority=True)
    layers = model.get_decoder().layers
    try:
        t0 = time.perf_counter()
        with ctx():
            learner.train_step(exs[:2], adv[:2])  # warm-up: kernels, autotuning, optimizer state
        torch.cuda.synchronize()
        row["warmup_s"] = round(time.perf_counter() - t0, 1)
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with ctx():
                stats = learner.train_step(exs, adv)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        peak = torch.cuda.max_memory_allocated()
    except torch.OutOfMemoryError as e:
        row.update(error=f"OOM: {str(e)[:120]}")
        for layer in layers:
            layer._compiled_call_impl = None
        learner.optimizer.zero_grad(set_to_none=True)
        del learner
        torch.cuda.empty_cache()
        return row
    tokens = sum(len(ex.ids) for ex in exs)
    flops = sum(shapes.train_flops(cfg, len(ex.ids), ex.mask[1:].count(1)) for ex in exs)
    best = min(times)
    row.update(seconds=[round(t, 3) for t in times], tokens=tokens, loss_tokens=stats["loss_tokens"],
               tokens_per_s=round(tokens / best), model_tflop=round(flops / 1e12, 1),
               achieved_tflops=round(flops / best / 1e12, 1), peak_gib=round(peak / 2**30, 1),
               loss=stats["loss"], grad_norm=stats["grad_norm"])
    learner.optimizer.zero_grad(set_to_none=True)
    for layer in layers:
        layer._compiled_call_impl = None
    del learner
    torch.cuda.empty_cache()
    return row


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="qwen3-1.7b,qwen3-4b")
    ap.add_argument("--variants", default="plain,chunked,ckpt")
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--length", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    env = shapes.environment()
    ceil = shapes.ceilings()
    print("ceilings", ceil, flush=True)
    rows, checks = [], {}
    for name in args.shapes.split(","):
        cfg = shapes.config(name)
        model = shapes.build(name, "cuda", torch.float32)
        rng = random.Random(0)
        exs = [mirl_example(rng, cfg.vocab_size, args.length) for _ in range(args.seqs)]
        adv = [rng.choice([-1.0, 1.0]) * rng.random() for _ in exs]
        checks[name] = check_head(model, exs[0])
        print(name, "head check", checks[name], flush=True)
        for variant in args.variants.split(","):
            row = run_variant(name, model, cfg, exs, adv, variant, args.repeats)
            if "achieved_tflops" in row:
                row["mfu_pct"] = round(100 * row["achieved_tflops"] / ceil["matmul_tflops"], 1)
            rows.append(row)
            print(row, flush=True)
        del model
        torch.cuda.empty_cache()
    shapes.write_out("learner", {"env": env, "ceilings": ceil, "checks": checks, "rows": rows, "args": vars(args)})
    print(f"\nceilings: matmul {ceil['matmul_tflops']} TFLOP/s (bf16 {ceil['matmul_n']}^3), "
          f"copy {ceil['copy_gbps']} GB/s; {env}")
    for name, c in checks.items():
        print(f"{name}: chunked vs plain head: loss {c['loss_plain']:.6f} / {c['loss_chunked']:.6f}, "
              f"max |dlp| {c['lp_max_abs_diff']:.2e}, grad rel diff {c['grad_rel_diff']:.2e} "
              f"(plain against itself: {c['grad_rel_diff_plain_twice']:.2e})")
    print(shapes.table(rows, ["shape", "variant", "tokens_per_s", "achieved_tflops", "mfu_pct", "peak_gib",
                              "seconds", "error"]))


if __name__ == "__main__":
    main()
