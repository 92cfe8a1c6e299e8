"""python benchmarks/gpu/token_check.py --tokenizer DIR [--device cuda] [--turns 3] [--max-tokens 48] [--rows 16]

The token path on a GPU. A SmolLM2-135M-shaped Llama with random weights (nothing can be
downloaded on the GPU machine; the tokenizer directory is SmolLM2's, carried along) is served by
the transformers engine (`mirl.llm.vllm_engine.TransformersEngine`) in float32. One episode of
`--turns` turns: each prompt is the previous prompt + the sampled ids + observation ids (template
glue from `mirl.agent.tokens.ChatGlue`), never a re-rendered chat. Then a teacher-forced float32
forward pass over the same ids. Prints the max |logprob difference| (sampled vs teacher-forced),
tokens/s of the episode and of `--rows` samples of one prompt decoded as one batch, and the same
for the engine's GPU default (bf16) against the float32 pass, for scale. `--json FILE` keeps it all.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mirl.agent import prompts  # noqa: E402
from mirl.agent.messages import build_messages  # noqa: E402
from mirl.agent.tokens import ChatGlue  # noqa: E402
from mirl.llm.generator import teacher_forced_logprobs  # noqa: E402
from mirl.llm.vllm_engine import TransformersEngine  # noqa: E402

INSTRUCTION = "Count the lines of the file /app/data.txt and write the count to /app/count.txt."
TEMPERATURE = 0.8


def smollm2_shaped(tokenizer_dir: str, out: Path, layers: int) -> Path:
    """A random-weight Llama with SmolLM2-135M's shape and tokenizer, saved as a checkpoint."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, rope_theta=100000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def episode(engine, device: str, turns: int, max_tokens: int) -> dict:
    """`turns` turns on appended ids; the sampler's logprobs against one teacher-forced pass each."""
    glue = ChatGlue.of(engine.tokenizer, engine.end_ids)
    ids = glue.prompt_ids(build_messages(INSTRUCTION, []))
    first = list(ids)
    turns_out, sampled, seconds = [], 0, 0.0
    for k in range(turns):
        sync(device)
        t0 = time.perf_counter()
        gen = engine.generate_tokens(ids, [0], max_tokens=max_tokens, temperature=TEMPERATURE, seed=k)
        sync(device)
        seconds += time.perf_counter() - t0
        s = gen.samples[0]
        sampled += len(s.ids)
        turns_out.append({"prompt": list(ids), "ids": s.ids, "logprobs": s.logprobs, "cached": gen.cached_tokens,
                          "finish": s.finish_reason})
        obs = [{"role": "user", "content": prompts.observation(f"{k + 3} /app/data.txt\n", 0, False)}]
        ids = ids + s.ids + glue.observation_ids(s.ids, obs)
    rebuilt = list(first)
    for t in turns_out:  # the prompts extend each other verbatim
        assert t["prompt"][:len(rebuilt)] == rebuilt, "a prompt does not extend the previous one"
        rebuilt = t["prompt"] + t["ids"]
    return {"turns": turns_out, "tokens": sampled, "seconds": seconds}


def worst(model, turns: list[dict]) -> float:
    diffs = [abs(a - b) for t in turns
             for a, b in zip(t["logprobs"], teacher_forced_logprobs(model, t["prompt"], t["ids"], TEMPERATURE))]
    return max(diffs) if diffs else float("nan")


def batch(engine, device: str, prompt: list[int], rows: int, max_tokens: int) -> dict:
    sync(device)
    t0 = time.perf_counter()
    gen = engine.generate_tokens(prompt, list(range(rows)), max_tokens=max_tokens, temperature=TEMPERATURE, seed=7)
    sync(device)
    seconds = time.perf_counter() - t0
    return {"rows": rows, "tokens": sum(len(s.ids) for s in gen.samples), "seconds": seconds,
            "turns": [{"prompt": prompt, "ids": s.ids, "logprobs": s.logprobs} for s in gen.samples[:4]]}


def main() -> int:
    ap = argparse.ArgumentParser(description="Token-path check of the transformers engine on a GPU.")
    ap.add_argument("--tokenizer", required=True, help="a directory holding SmolLM2's tokenizer files")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--layers", type=int, default=30, help="30 = SmolLM2-135M; fewer for a quick CPU dry run")
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    import torch
    import transformers

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no GPU visible to torch", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 (the default, stated)
    where = args.device if not args.device.startswith("cuda") else torch.cuda.get_device_name()
    print(f"device {where}; torch {torch.__version__}, transformers {transformers.__version__}")
    report: dict = {"device": where, "torch": torch.__version__, "transformers": transformers.__version__,
                    "layers": args.layers, "temperature": TEMPERATURE}
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = smollm2_shaped(args.tokenizer, Path(tmp) / "model", args.layers)
        f32 = TransformersEngine(ckpt, device=args.device, dtype="float32")
        episode(f32, args.device, 1, 4)  # warm-up: kernels, allocator
        ep = episode(f32, args.device, args.turns, args.max_tokens)
        bt = batch(f32, args.device, ep["turns"][-1]["prompt"], args.rows, 64)
        report["float32"] = {
            "episode_max_abs_logprob_diff": worst(f32.model, ep["turns"]),
            "batch_max_abs_logprob_diff": worst(f32.model, bt["turns"]),
            "episode_tokens_per_s": ep["tokens"] / ep["seconds"], "batch_tokens_per_s": bt["tokens"] / bt["seconds"],
            "prompt_tokens": [len(t["prompt"]) for t in ep["turns"]], "cached_tokens": [t["cached"] for t in ep["turns"]],
            "sampled_tokens": [len(t["ids"]) for t in ep["turns"]], "batch_rows": bt["rows"]}
        engine = TransformersEngine(ckpt, device=args.device)  # the GPU default: bfloat16
        episode(engine, args.device, 1, 4)
        ep16 = episode(engine, args.device, args.turns, args.max_tokens)
        bt16 = batch(engine, args.device, ep16["turns"][-1]["prompt"], args.rows, 64)
        report["bfloat16"] = {
            "dtype": str(next(engine.model.parameters()).dtype),
            "episode_max_abs_logprob_diff_vs_float32_pass": worst(f32.model, ep16["turns"]),
            "episode_tokens_per_s": ep16["tokens"] / ep16["seconds"],
            "batch_tokens_per_s": bt16["tokens"] / bt16["seconds"]}
    f, b = report["float32"], report["bfloat16"]
    print(f"float32: {args.turns} turns on appended ids, prompts {f['prompt_tokens']} tokens "
          f"(cached {f['cached_tokens']}), sampled {f['sampled_tokens']}")
    print(f"  max |sampled - teacher-forced logprob|: episode {f['episode_max_abs_logprob_diff']:.2e}, "
          f"{args.rows}-row batch {f['batch_max_abs_logprob_diff']:.2e}")
    print(f"  tokens/s: one sequence {f['episode_tokens_per_s']:.1f}, {args.rows} rows {f['batch_tokens_per_s']:.1f}")
    print(f"{b['dtype']} (GPU default): max |logprob - float32 teacher-forced| "
          f"{b['episode_max_abs_logprob_diff_vs_float32_pass']:.2e}; tokens/s one sequence "
          f"{b['episode_tokens_per_s']:.1f}, {args.rows} rows {b['batch_tokens_per_s']:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
