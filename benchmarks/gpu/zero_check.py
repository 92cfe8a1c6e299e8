"""torchrun --nproc_per_node N benchmarks/gpu/zero_check.py [--stage 2|3] [--shape tiny|qwen3-1.7b] [--out r.json]

Does the DeepSpeed ZeRO learner take the single-process learner's step? Every rank builds the same
randomly initialised model and batch; rank 0 also runs the embedded `Learner` on it; then one
`ZeroLearner` step over N ranks. Prints (and writes to --out) the largest differences of loss,
grad norm, clipped gradients and weights after the step (`mirl.training.scale.parity`), and
exits 1 past the tolerance: float32 on a CPU (gloo), bf16 on GPUs (NCCL, DeepSpeed's bf16 mode
against the learner's float32 weights under bf16 autocast).

On a CPU (no GPU visible, DeepSpeed's CPU accelerator) it is the test suite's check
(tests/training/test_zero_learner.py); `--shape tiny` is a 2-layer Llama, fast anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# tolerances of `differences` per precision: float32 is rounding only; bf16 is the module in bf16
# (the update, relative to the reference's: as weights/lr under AdamW's sign-like first step)
TOLERANCE = {"fp32": {"loss": 1e-5, "grad_norm": 1e-4, "entropy": 1e-5, "grads": 1e-4, "weights": 5e-2,
                      "update": 5e-2},
             "bf16": {"loss": 2e-2, "grad_norm": 5e-2, "entropy": 2e-2, "grads": 1e-1, "weights": None,
                      "update": None}}


def tiny_model(seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg)


def batch(vocab: int, n: int, lengths: tuple[int, int], seed: int = 1):
    """`n` examples of random lengths and loss masks (a masked prompt, then sampled tokens) and
    advantages of both signs, the sampler's logprobs near the model's so DPPO masks a few."""
    from mirl.training.learner import Example

    rng = random.Random(seed)
    exs, adv = [], []
    for _ in range(n):
        length = rng.randint(*lengths)
        ids = [rng.randrange(vocab) for _ in range(length)]
        mask = [0] * 3 + [rng.randint(0, 1) for _ in range(length - 3)]
        exs.append(Example(ids, mask, [(-4.6 + rng.uniform(-0.3, 0.3)) if m else 0.0 for m in mask]))
        adv.append(rng.choice([-1.0, 1.0]) * (0.2 + rng.random()))
    return exs, adv


def main() -> int:
    import torch

    from mirl.training.learner import LearnerConfig
    from mirl.training.scale.parity import zero_result
    from mirl.training.scale.zero_learner import ZeroLearner

    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", type=int, default=2)
    ap.add_argument("--shape", default="tiny")
    ap.add_argument("--seqs", type=int, default=5)
    ap.add_argument("--length", type=int, default=40, help="longest sequence (tokens)")
    ap.add_argument("--micro-batch-tokens", type=int, default=60)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--adam-eps", type=float, default=1e-8,
                    help="AdamW's eps on both sides; far above |g| the step is lr * g / eps, so it shows clipping")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    gpu = torch.cuda.is_available()
    if args.shape == "tiny":
        build, vocab = tiny_model, 97
    else:
        import shapes

        vocab = shapes.config(args.shape).vocab_size

        def build():
            return shapes.build(args.shape, "cpu", torch.float32)
    exs, adv = batch(vocab, args.seqs, (max(5, args.length // 8), args.length))
    config = LearnerConfig(lr=args.lr, max_grad_norm=args.max_grad_norm, micro_batch_tokens=args.micro_batch_tokens,
                           temperature=1.0, compile_layers=False, adam_eps=args.adam_eps)
    learner = ZeroLearner(build(), config, stage=args.stage)
    got = zero_result(learner, exs, adv)
    code = check(args, learner, got, build, config, exs, adv, gpu) if learner.rank == 0 else 0
    # every rank leaves together: a rank that exits while rank 0 still computes its reference tears its
    # process group down under the others (gloo then aborts one of them, and torchrun exits 1)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return code


def leave(code: int) -> None:
    """Exit without the interpreter's finalization: the verdict is written and the process group is
    gone, and what finalization still runs (atexit hooks, C++ static destructors of the communication
    threads) aborted one rank of a two-rank CPU run in a CI run (SIGABRT after `ok`), turning a pass into
    torchrun's exit code 1."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def check(args, learner, got, build, config, exs, adv, gpu: bool) -> int:
    """Rank 0: the embedded learner's step on the same batch, the differences, the verdict (0 or 1)."""
    from mirl.training.scale.parity import differences, reference_result

    ref_model = build().to("cuda" if gpu else "cpu")
    ref = reference_result(ref_model, config, exs, adv)
    ref = {k: ({n: t.cpu() for n, t in v.items()} if k in ("grads", "weights") else v) for k, v in ref.items()}
    diffs = differences(ref, got, args.lr)
    tol = TOLERANCE["bf16" if learner.bf16 else "fp32"]
    bad = {k: v for k, v in diffs.items() if tol.get(k) is not None and v > tol[k]}
    result = {"stage": args.stage, "ranks": learner.world, "shape": args.shape, "bf16": learner.bf16,
              "differences": diffs, "tolerance": tol, "ok": not bad, "zero_stats": got["stats"],
              "reference_stats": ref["stats"]}
    print(json.dumps(result, indent=1, default=str))
    if args.out:
        Path(args.out).write_text(json.dumps(result, default=str))
    return 1 if bad else 0


if __name__ == "__main__":
    leave(main())
