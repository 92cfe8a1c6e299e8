"""Model shapes, FLOP and byte counts, and the two measured ceilings, shared by the GPU benchmarks.

The shapes are the published configs (Qwen3-1.7B, Qwen3-4B, SmolLM2-135M), built in code: no
weights or downloads are needed, the models are randomly initialised.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

QWEN3 = dict(vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
             head_dim=128, num_key_value_heads=8, tie_word_embeddings=True, hidden_act="silu")
SHAPES = {
    "qwen3-1.7b": ("qwen3", dict(QWEN3, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                                 num_attention_heads=16)),
    "qwen3-0.6b": ("qwen3", dict(QWEN3, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                 num_attention_heads=16)),
    "qwen3-4b": ("qwen3", dict(QWEN3, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                               num_attention_heads=32)),
    "smollm2-135m": ("llama", dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                   num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                                   rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)),
}


def config(name: str, attn: str = "sdpa"):
    from transformers import LlamaConfig, Qwen3Config

    kind, kw = SHAPES[name]
    cls = Qwen3Config if kind == "qwen3" else LlamaConfig
    return cls(**kw, attn_implementation=attn)


def build(name: str, device: str = "cuda", dtype=None, seed: int = 0):
    """A randomly initialised causal LM of this shape, created directly on `device`."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = config(name)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype or torch.float32)
    return model


def word_tokenizer(vocab: int, directory: Path) -> None:
    """A word-level tokenizer over the model's vocabulary; its last id is the end token."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"t{i}": i for i in range(vocab - 2)}
    words.update({"<unk>": vocab - 2, "<|im_end|>": vocab - 1})
    tk = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<|im_end|>").save_pretrained(directory)


def checkpoint(name: str, directory: Path, dtype=None, seed: int = 0) -> Path:
    """A random model of this shape saved as a checkpoint (in `dtype`, bf16 by default) with a word
    tokenizer, for an engine to load."""
    import torch

    model = build(name, "cuda", torch.float32, seed).to(dtype or torch.bfloat16)
    model.save_pretrained(directory)
    word_tokenizer(model.config.vocab_size, directory)
    del model
    torch.cuda.empty_cache()
    return directory


def dims(cfg) -> dict:
    h, layers = cfg.hidden_size, cfg.num_hidden_layers
    d = getattr(cfg, "head_dim", None) or h // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * cfg.intermediate_size
    return {"layers": layers, "hidden": h, "q_dim": q, "kv_dim": kv, "body_params": per_layer * layers,
            "head_params": h * cfg.vocab_size, "vocab": cfg.vocab_size}


def train_flops(cfg, length: int, loss_tokens: int) -> float:
    """Model FLOPs of one training pass (forward + backward, 3x forward) over one sequence: the
    body's matrix products on every token, the LM head on the loss tokens only (all the learner
    needs), causal attention (QK^T and AV over the L(L+1)/2 query-key pairs). Recomputation from
    gradient checkpointing and the head's recomputed logits are not counted (MFU, not HFU)."""
    m = dims(cfg)
    body = 6 * m["body_params"] * length
    head = 6 * m["head_params"] * loss_tokens
    attn = 3 * m["layers"] * 2 * m["q_dim"] * length * (length + 1)
    return float(body + head + attn)


def decode_bytes(cfg, rows: int, prefix: int, new: int, bytes_per: int = 2) -> dict:
    """Least bytes a decode step must read, averaged over `new` steps: every weight once (the
    tied head counted once), the shared prefix's KV once, each row's own KV so far."""
    m = dims(cfg)
    weights = (m["body_params"] + m["head_params"]) * bytes_per
    kv_token = 2 * m["kv_dim"] * m["layers"] * bytes_per
    avg_own = (new - 1) / 2
    return {"weights": weights, "kv_prefix": kv_token * prefix, "kv_rows": kv_token * rows * avg_own,
            "kv_token": kv_token, "per_step": weights + kv_token * (prefix + rows * avg_own)}


def ceilings(size_gb: float = 2.0, n: int = 8192) -> dict:
    """The two ceilings on this device: a bf16 n x n x n matrix product on random data (TFLOP/s)
    and a device-to-device copy (GB/s, bytes read + written), each the median of timed repeats."""
    import torch
    from triton.testing import do_bench

    torch.backends.cuda.matmul.allow_tf32 = False

    def matmul_ms() -> float:
        a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        return do_bench(lambda: torch.mm(a, b, out=c), warmup=200, rep=1000, return_mode="median")

    def copy_ms(elems: int) -> float:
        src = torch.randn(elems, device="cuda")
        dst = torch.empty_like(src)
        return do_bench(lambda: dst.copy_(src), warmup=100, rep=500, return_mode="median")

    ms = matmul_ms()
    tflops = 2 * n ** 3 / ms / 1e9
    elems = int(size_gb * 1e9 / 4)
    ms_copy = copy_ms(elems)
    gbps = 2 * elems * 4 / ms_copy / 1e6
    torch.cuda.empty_cache()
    return {"matmul_tflops": round(tflops, 1), "matmul_ms": round(ms, 4), "copy_gbps": round(gbps, 1),
            "copy_ms": round(ms_copy, 4), "copy_bytes": 2 * elems * 4, "matmul_n": n,
            "device": torch.cuda.get_device_name(), "torch": torch.__version__}


def environment() -> dict:
    import torch
    import transformers
    import triton

    return {"torch": torch.__version__, "transformers": transformers.__version__, "triton": triton.__version__,
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}


def write_out(name: str, data: dict) -> None:
    """Full numbers to $OUT/<name>.json (or the current directory without $OUT)."""
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(data, indent=1, default=str))


def write_text(name: str, text: str) -> None:
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.txt").write_text(text)


def table(rows: list[dict], cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)
