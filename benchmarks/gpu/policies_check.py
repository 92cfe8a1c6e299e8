"""python3 benchmarks/gpu/policies_check.py [--shape smollm2-135m] [--rows 24]

Two checks the small-scale experiment's evaluation and training rest on, in one short GPU call with
no carried files (a randomly initialised model of a published shape, float32, as the .gguf's policy is):

- two policies at once: two `PagedEngine`s of one process start together and serve concurrent requests
  from threads, as the misbehavior-rate stage does with the base policy and a checkpoint. Their first
  steps compile and capture CUDA graphs at the same time (what failed in the run of 2026-12-05 before
  `mirl/engines/compile_lock.py`). Every request must succeed and give the ids the same request gives
  on a fresh engine alone (a row's draws depend only on seed and sample index).
- the learner against its sampler: a float32 engine's sampled ids and logprobs, teacher-forced by the
  learner at the same weights (`Learner.train_step` at lr 0 reports mean |log pi - log mu|), in the
  sampler's precision (`in_samplers_precision`: float32) and under bf16 autocast, the GPU's default
  before: the small-scale run logged 0.012-0.020.

Exits 1 when a check fails; numbers in $OUT/policies_check.json.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import shapes  # noqa: E402
import torch  # noqa: E402

from mirl.engines.paged import PagedEngine  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # a CPU runs it eagerly, to try the script


def checkpoint(name: str, directory: Path) -> Path:
    model = shapes.build(name, DEVICE, torch.float32)
    model.save_pretrained(directory)
    shapes.word_tokenizer(model.config.vocab_size, directory)
    return directory


def free() -> None:
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def requests(n: int, vocab: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"prompt_ids": [rng.randrange(vocab - 2) for _ in range(rng.randint(200, 900))],
             "sample_indices": [0, 1], "max_tokens": 48, "temperature": 1.0, "top_p": 0.95, "seed": i}
            for i in range(n)]


def serve(engine: PagedEngine, reqs: list[dict], out: dict, errors: list, threads: int = 8) -> None:
    """Send `reqs` from `threads` threads at once; out[i] = the sampled ids of request i."""
    def worker(k: int) -> None:
        for i in range(k, len(reqs), threads):
            try:
                g = engine.generate_tokens(**reqs[i])
                out[i] = [s.ids for s in g.samples]
            except Exception as e:  # noqa: BLE001 - counted and printed: the check is that none happen
                errors.append(f"request {i}: {type(e).__name__}: {e}")
                traceback.print_exc()

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def two_policies(ckpt: Path, rows: int, vocab: int) -> dict:
    reqs = requests(rows, vocab)
    alone: dict = {}
    errors: list = []
    e = PagedEngine(ckpt, dtype="float32")
    serve(e, reqs, alone, errors)
    e.close()
    del e
    free()
    t0 = time.perf_counter()
    engines: list = [None, None]

    def start(k: int) -> None:
        engines[k] = PagedEngine(ckpt, dtype="float32")

    ts = [threading.Thread(target=start, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    got = [{}, {}]
    ts = [threading.Thread(target=serve, args=(engines[k], reqs, got[k], errors)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    same = [sum(got[k].get(i) == alone.get(i) for i in range(rows)) for k in range(2)]
    stats = [dict(e.stats) for e in engines]
    for e in engines:
        e.close()
    return {"requests_per_policy": rows, "errors": errors[:10], "error_count": len(errors),
            "same_as_alone": same, "wall_s": round(wall, 2), "engine_stats": stats,
            "ok": not errors and same == [rows, rows] and len(alone) == rows}


def learner_matches(ckpt: Path, rows: int) -> dict:
    from transformers import AutoModelForCausalLM

    from mirl.training.engine import in_samplers_precision
    from mirl.training.learner import Example, Learner, LearnerConfig

    e = PagedEngine(ckpt, dtype="float32")
    vocab = int(e.model.config.vocab_size)
    exs = []
    for r in requests(rows, vocab, seed=1):
        g = e.generate_tokens(**{**r, "top_p": 1.0})
        for s in g.samples:
            p = r["prompt_ids"]
            exs.append(Example(p + s.ids, [0] * len(p) + [1] * len(s.ids), [0.0] * len(p) + list(s.logprobs)))
    e.close()
    adv = [1.0 if i % 2 else -1.0 for i in range(len(exs))]
    out = {"sequences": len(exs), "sampled_tokens": sum(ex.loss_tokens for ex in exs)}
    for name, bf16 in (("sampler_precision", None), ("bf16_autocast", True)):
        model = AutoModelForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32).to(DEVICE)
        config = LearnerConfig(lr=0.0, compile_layers=False, bf16=bf16, micro_batch_tokens=8192)
        config = in_samplers_precision(config, SimpleNamespace(model=model))
        stats = Learner(model, config).train_step(exs, adv)
        out[name] = {"bf16": config.bf16, "logprob_abs_diff": stats["logprob_abs_diff"]}
        del model
        free()
    out["ok"] = out["sampler_precision"]["bf16"] is False and out["sampler_precision"]["logprob_abs_diff"] < 1e-4
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="smollm2-135m")
    ap.add_argument("--rows", type=int, default=24, help="requests per policy (2 samples each)")
    args = ap.parse_args()
    result: dict = {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu", "torch": torch.__version__,
                    "shape": args.shape}
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = checkpoint(args.shape, Path(tmp) / "ckpt")
        vocab = shapes.config(args.shape).vocab_size
        for name, fn in (("two_policies", lambda: two_policies(ckpt, args.rows, vocab)),
                         ("learner", lambda: learner_matches(ckpt, max(2, args.rows // 3)))):
            t0 = time.perf_counter()
            try:
                result[name] = fn()
            except Exception as e:  # noqa: BLE001 - one check's failure is reported; the other still runs
                traceback.print_exc()
                result[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            result[name]["seconds"] = round(time.perf_counter() - t0, 1)
            print(name, {k: v for k, v in result[name].items() if k != "engine_stats"}, flush=True)
    shapes.write_out("policies_check", result)
    ok = all(result[k]["ok"] for k in ("two_policies", "learner"))
    print("policies_check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
