"""The Triton kernels of the paged engine against the torch reference, in the interpreter on a CPU:
    python -m tests.engines.kernel_checks    (prints one JSON line of the largest differences)
Run as a separate process: the interpreter must be switched on before triton is imported."""

import tests.engines.interpret  # noqa: F401,I001  (first: switches the interpreter on)

import json
import random
import tempfile
from types import SimpleNamespace

import torch

from mirl.engines.paged import kernels
from mirl.engines.paged.attention import prefill_tiles, reference


def paged(contexts, pages, page, rng):
    """A page table per context, pages drawn at random from 1..pages-1 without reuse."""
    free = list(range(1, pages))
    rng.shuffle(free)
    table = torch.zeros(len(contexts), max(-(-c // page) for c in contexts), dtype=torch.int32)
    for s, c in enumerate(contexts):
        n = -(-c // page)
        table[s, :n] = torch.tensor([free.pop() for _ in range(n)], dtype=torch.int32)
    return table


def main() -> None:
    rng = random.Random(0)
    torch.manual_seed(0)
    page, kvh, g, d = 4, 2, 3, 16
    heads = kvh * g
    kv = torch.randn(96 * page, 2, kvh, d)
    out = {}
    contexts = [1, 5, 16, 33, 61]
    table = paged(contexts, 96, page, rng)
    q = torch.randn(len(contexts), heads, d)
    want = reference(q, kv, table, [(b, 1, c) for b, c in enumerate(contexts)], page, 0.25)
    for splits in (1, 3):
        got = torch.full_like(q, float("nan"))
        scratch = kernels.DecodeScratch(8, heads, d, splits, "cpu") if splits > 1 else None
        kernels.decode_attention(q, kv, table, torch.tensor(contexts), page, 0.25, got, scratch, block_n=16)
        out[f"decode_split{splits}"] = float((got - want).abs().max())
    seqs = [(5, 5), (9, 30), (1, 12), (20, 20)]  # (new tokens, positions after them)
    host, at = [], 0
    for q_len, ctx in seqs:
        host.append((at, q_len, ctx))
        at += q_len
    table = paged([c for _, c in seqs], 96, page, rng)
    q = torch.randn(at, heads, d)
    want = reference(q, kv, table, host, page, 0.25)
    tseq, tm0 = prefill_tiles(host, 16, "cpu")
    col = lambda i: torch.tensor([h[i] for h in host], dtype=torch.int32)  # noqa: E731
    got = kernels.prefill_attention(q, kv, table, col(0), col(1), col(2), tseq, tm0, page, 0.25, block_m=16,
                                    block_n=16)
    out["prefill"] = float((got - want).abs().max())
    # the engine end to end with the kernels, against itself with the reference
    from mirl.engines.paged import PagedEngine
    from tests.engines.tiny import tiny_checkpoint

    ckpt = tiny_checkpoint(tempfile.mkdtemp(), "qwen3")
    runs = {}
    for backend in ("torch", "triton"):
        e = PagedEngine(ckpt, device="cpu", dtype="float32", page_size=4, kv_tokens=4096, prefill_tokens=16,
                        attention=backend)
        ids = e.prompt_ids([{"role": "user", "content": "list the files in /app, then count them"}])
        runs[backend] = e.generate_tokens(ids, [0, 1, 2], max_tokens=10, temperature=0.9, seed=1).samples
        e.close()
    out["engine_same_ids"] = [a.ids for a in runs["torch"]] == [b.ids for b in runs["triton"]]
    out["engine_logprobs"] = max(abs(x - y) for a, b in zip(runs["torch"], runs["triton"])
                                 for x, y in zip(a.logprobs, b.logprobs))
    # what the dots run as: float32 on a GPU on tensor cores (three TF32 products), IEEE in the interpreter
    out["precision"] = {f"{dt}-{dev}": kernels.precision(SimpleNamespace(dtype=getattr(torch, dt), is_cuda=dev == "cuda"))
                        for dt in ("float32", "bfloat16") for dev in ("cuda", "cpu")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
