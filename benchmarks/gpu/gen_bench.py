"""python benchmarks/gpu/gen_bench.py [--shapes qwen3-1.7b,smollm2-135m] [--rows 16] [--prefix 4096] [--new 512]

Group generation on one GPU through the engine the training stage uses there without vLLM
(`TransformersEngine.generate_tokens`, which decodes with `mirl.llm.group_decode`): `--rows`
continuations of one random `--prefix`-token prompt, `--new` tokens each, T = 1, randomly
initialised models of the named shapes in bf16 (saved as a checkpoint with a word-level tokenizer
built in code, then loaded by the engine).

Checks first: greedy decoding against `model.generate` (float32 with graphs and no compile:
tokens identical; bf16 through the engine: the shared leading tokens), the stored logprobs against
a teacher-forced pass over the same ids. Then timing: a cold call (prefill, compile, graph
capture) and a warm one; decode step time; bandwidth utilisation = the least bytes a step reads
(`shapes.decode_bytes`: weights once, the shared prefix's KV once, each row's own KV) over the step
time, over the measured copy bandwidth; and plain `model.generate` on the same rows (prompt
repeated per row, sampling, `--plain-new` tokens) for the ratio. Full numbers: $OUT/gen.json.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import shapes  # noqa: E402

from mirl.llm.generator import teacher_forced_logprobs  # noqa: E402
from mirl.llm.group_decode import GroupDecoder  # noqa: E402
from mirl.llm.vllm_engine import TransformersEngine  # noqa: E402


def word_tokenizer(vocab: int, directory: Path) -> None:
    """A word-level tokenizer over the model's vocabulary; its last id is the end token."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"t{i}": i for i in range(vocab - 2)}
    words.update({"<unk>": vocab - 2, "<|im_end|>": vocab - 1})
    tk = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<|im_end|>").save_pretrained(directory)


def leading_same(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def greedy_check(model, prompt: list[int], rows: int, new: int, graphs_only: bool) -> dict:
    """GroupDecoder greedy against model.generate greedy on `prompt`; logprobs against teacher forcing."""
    import torch

    dec = GroupDecoder(model, graphs=True, compiled=not graphs_only)
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([prompt], device="cuda"), use_cache=True)
        cache = getattr(out, "past_key_values", None) or out.cache
        kv = [(layer.keys, layer.values) for layer in cache.layers]
        got = dec.generate(kv, out.logits[:, -1], list(range(rows)), new, temperature=0.0)
        ref = model.generate(torch.tensor([prompt], device="cuda"), do_sample=False, max_new_tokens=new,
                             min_new_tokens=new, pad_token_id=0)[0, len(prompt):].tolist()
    tf = teacher_forced_logprobs(model, prompt, got[0][0])
    return {"rows_agree": all(g[0] == got[0][0] for g in got), "identical": got[0][0] == ref,
            "leading_same": leading_same(got[0][0], ref), "new": new,
            "lp_max_abs_diff": max(abs(a - b) for a, b in zip(tf, got[0][1]))}


def plain_generate(model, prompt: list[int], rows: int, new: int) -> dict:
    import torch

    ids = torch.tensor([prompt] * rows, device="cuda")
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0, attention_mask=torch.ones_like(ids))
    res = {}
    for n in (1, new):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.inference_mode():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)
        torch.cuda.synchronize()
        res[n] = time.perf_counter() - t0
    step = (res[new] - res[1]) / (new - 1)
    return {"seconds": round(res[new], 3), "prefill_s": round(res[1], 3), "step_ms": round(step * 1e3, 2),
            "tokens_per_s": round(rows * new / res[new], 1), "new": new}


def bench_shape(name: str, args, ceil: dict, work: Path) -> dict:
    import random

    import torch

    cfg = shapes.config(name)
    row: dict = {"shape": name, "rows": args.rows, "prefix": args.prefix, "new": args.new}
    rng = random.Random(0)
    prompt = [rng.randrange(cfg.vocab_size - 2) for _ in range(args.prefix)]
    short = prompt[:300]
    # float32 check: graphs, eager kernels
    model = shapes.build(name, "cuda", torch.float32).eval()
    row["check_fp32"] = greedy_check(model, short, 4, 64, graphs_only=True)
    print(name, "fp32 greedy", row["check_fp32"], flush=True)
    model = model.to(torch.bfloat16)
    d = work / name
    model.save_pretrained(d)
    word_tokenizer(cfg.vocab_size, d)
    del model
    torch.cuda.empty_cache()
    t0 = time.perf_counter()
    engine = TransformersEngine(d)
    row["load_s"] = round(time.perf_counter() - t0, 2)
    assert engine.group is not None, "the engine did not pick the group decoder"
    row["check_bf16"] = greedy_check(engine.model, short, args.rows, 64, graphs_only=False)
    print(name, "bf16 greedy", row["check_bf16"], flush=True)
    stats = engine.group.stats
    runs = []
    for seed in (0, 1, 2):
        torch.cuda.synchronize()
        s0, d0 = stats["steps"], stats["decode_s"]
        t0 = time.perf_counter()
        gen = engine.generate_tokens(prompt, list(range(args.rows)), max_tokens=args.new, temperature=1.0, seed=seed)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        steps, dec = stats["steps"] - s0, stats["decode_s"] - d0
        n = sum(len(s.ids) for s in gen.samples)
        runs.append({"seed": seed, "seconds": round(wall, 3), "tokens": n, "tokens_per_s": round(n / wall, 1),
                     "prefill_s": gen.meta.get("prefill_s"), "cached_tokens": gen.cached_tokens,
                     "decode_s": round(dec, 3), "steps": steps, "step_ms": round(dec / max(steps, 1) * 1e3, 3)})
        print(name, runs[-1], flush=True)
    row["runs"] = runs
    warm = min(runs[1:], key=lambda r: r["seconds"])
    b = shapes.decode_bytes(cfg, args.rows, args.prefix, args.new)
    row.update(bytes_per_step=b, tokens_per_s=warm["tokens_per_s"], step_ms=warm["step_ms"],
               cold_tokens_per_s=runs[0]["tokens_per_s"],
               bound_step_ms=round(b["per_step"] / (ceil["copy_gbps"] * 1e9) * 1e3, 3))
    row["bw_util_pct"] = round(100 * row["bound_step_ms"] / warm["step_ms"], 1)
    sample = gen.samples[0]
    tf = teacher_forced_logprobs(engine.model, prompt, sample.ids, 1.0)
    row["sampled_lp_vs_teacher_bf16"] = max(abs(a - b) for a, b in zip(tf, sample.logprobs))
    ref = copy.deepcopy(engine.model).float()  # the same weights in float32: how far bf16 itself is
    tf32 = teacher_forced_logprobs(ref, prompt, sample.ids, 1.0)
    del ref
    torch.cuda.empty_cache()
    row["sampled_lp_vs_teacher_fp32"] = max(abs(a - b) for a, b in zip(tf32, sample.logprobs))
    row["teacher_bf16_vs_fp32"] = max(abs(a - b) for a, b in zip(tf32, tf))
    row["graphs_captured"] = stats["graphs_captured"]
    plain = plain_generate(engine.model, prompt, args.rows, args.plain_new.get(name, args.new))
    row["plain"] = plain
    row["plain_tokens_per_s"] = plain["tokens_per_s"]
    row["ratio"] = round(row["tokens_per_s"] / plain["tokens_per_s"], 1)
    row["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
    print(name, {k: v for k, v in row.items() if k not in ("runs",)}, flush=True)
    del engine
    torch.cuda.empty_cache()
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="qwen3-1.7b,smollm2-135m")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--prefix", type=int, default=4096)
    ap.add_argument("--new", type=int, default=512)
    ap.add_argument("--plain-new", default="qwen3-1.7b=512,smollm2-135m=128")
    args = ap.parse_args()
    args.plain_new = {k: int(v) for k, v in (kv.split("=") for kv in args.plain_new.split(",") if kv)}
    env = shapes.environment()
    ceil = shapes.ceilings()
    print("ceilings", ceil, flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.shapes.split(","):
            try:
                rows.append(bench_shape(name, args, ceil, Path(work)))
            except Exception as e:  # noqa: BLE001 - report and go on to the next shape
                import traceback

                traceback.print_exc()
                rows.append({"shape": name, "error": repr(e)[:300]})
    shapes.write_out("gen", {"env": env, "ceilings": ceil, "rows": rows, "args": vars(args)})
    print(f"\nceilings: copy {ceil['copy_gbps']} GB/s, matmul {ceil['matmul_tflops']} TFLOP/s; {env}")
    for r in rows:
        if "check_fp32" in r:
            print(f"{r['shape']}: fp32 greedy identical to generate: {r['check_fp32']['identical']} "
                  f"(lp diff {r['check_fp32']['lp_max_abs_diff']:.1e}); bf16 greedy leading same "
                  f"{r['check_bf16']['leading_same']}/{r['check_bf16']['new']} (lp diff "
                  f"{r['check_bf16']['lp_max_abs_diff']:.1e}); sampled lp vs teacher bf16 "
                  f"{r['sampled_lp_vs_teacher_bf16']:.1e}, vs teacher fp32 {r['sampled_lp_vs_teacher_fp32']:.1e} "
                  f"(teacher bf16 vs fp32 {r['teacher_bf16_vs_fp32']:.1e})")
    print(shapes.table(rows, ["shape", "rows", "prefix", "new", "tokens_per_s", "cold_tokens_per_s", "step_ms",
                              "bound_step_ms", "bw_util_pct", "plain_tokens_per_s", "ratio", "peak_gib", "error"]))


if __name__ == "__main__":
    main()
