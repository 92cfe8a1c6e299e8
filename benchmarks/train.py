"""python benchmarks/train.py [--run runs/demo] [--sequences 8] [--length 1024] [--repeats 3] [--device cpu]

The learner's speed and where a training step's time goes.

1. Learner: `Learner.train_step` of the training stage on SmolLM2-135M (the embedded model's
   weights, float32 on the CPU, bf16 autocast on a GPU), batches of `--sequences` sequences of
   `--length` tokens with a loss mask like a real MiRL batch (the first 60% of each sequence is
   prefix and tool output, mask 0; then alternating policy replies of 48 tokens and tool outputs of
   96, masked 1 and 0). Prints tokens per second (all tokens in the forward pass) and loss tokens
   per second, padded micro-batches of 2,048 and 8,192 tokens side by side in one run, median of
   `--repeats` steps after a warm-up step.
2. With `--run`, the step time split of that run's training (`metrics.jsonl`): rollouts (playing
   and verifying, summed over rollouts and as wall time of the collection), reward (judges),
   learner, and weight hand-off, per step and in total.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import time
from pathlib import Path


def batch(n: int, length: int, vocab: int, seed: int = 0):
    from mirl.training.learner import Example

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ids = [rng.randrange(vocab) for _ in range(length)]
        mask = [0] * int(length * 0.6)
        while len(mask) < length:
            mask += [1] * 48 + [0] * 96
        mask = mask[:length]
        out.append(Example(ids, mask, [-1.5 if m else 0.0 for m in mask]))
    return out


def learner_rows(args) -> list[dict]:
    import torch

    from mirl.engines.registry import get
    from mirl.training.learner import Learner, LearnerConfig

    engine = get("smollm2")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    examples = batch(args.sequences, args.length, int(engine.model.config.vocab_size))
    advantages = [0.5 if i % 2 else -0.5 for i in range(len(examples))]
    learners = {}
    for tokens in (2048, 8192):
        model = copy.deepcopy(engine.model).to(device=device, dtype=torch.float32)
        learners[tokens] = Learner(model, LearnerConfig(lr=1e-6, micro_batch_tokens=tokens))
        learners[tokens].train_step(examples, advantages)  # warm-up
    times: dict[int, list[float]] = {t: [] for t in learners}
    for _ in range(args.repeats):  # interleaved, so a change in load hits both
        for tokens, learner in learners.items():
            t0 = time.perf_counter()
            stats = learner.train_step(examples, advantages)
            times[tokens].append(time.perf_counter() - t0)
    total = sum(len(e.ids) for e in examples)
    loss_tokens = sum(e.loss_tokens for e in examples)
    rows = []
    for tokens, ts in times.items():
        s = statistics.median(ts)
        rows.append({"device": device, "micro_batch_tokens": tokens, "sequences": len(examples), "length": args.length,
                     "step_s": round(s, 3), "tokens_per_s": round(total / s, 1),
                     "loss_tokens_per_s": round(loss_tokens / s, 1), "micro_batches": stats["micro_batches"]})
    return rows


def split_rows(run: Path) -> list[dict]:
    from mirl.jsonl import read_jsonl

    rows, _ = read_jsonl(run / "training" / "metrics.jsonl")
    keys = ["collect_s", "rollout_s", "reward_s", "learner_s", "sync_s", "step_s"]
    out = [{"step": r["step"], **{k: r.get(k) for k in keys}, "rollouts": r.get("rollouts"),
            "learner_tokens_per_s": r.get("learner_tokens_per_s")} for r in rows]
    if rows:
        out.append({"step": "total", **{k: round(sum(r.get(k) or 0 for r in rows), 2) for k in keys},
                    "rollouts": sum(r.get("rollouts") or 0 for r in rows), "learner_tokens_per_s": None})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, help="a run directory whose training metrics to split")
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="")
    ap.add_argument("--skip-learner", action="store_true")
    args = ap.parse_args()
    import pandas as pd

    if not args.skip_learner:
        rows = learner_rows(args)
        print("learner train_step (SmolLM2-135M):")
        print(pd.DataFrame(rows).to_string(index=False))
        print(json.dumps(rows))
    if args.run:
        split = split_rows(args.run)
        print(f"\nstep time split of {args.run} (collect_s is wall time; rollout_s and reward_s sum over rollouts):")
        print(pd.DataFrame(split).to_string(index=False) if split else "no training metrics")


if __name__ == "__main__":
    main()
