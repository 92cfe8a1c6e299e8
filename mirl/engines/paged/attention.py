"""Attention over paged KV: what a forward pass needs to know about its sequences, and two backends.

`Decode` (one new token per sequence, static buffers a CUDA graph reads) and `Prefill` (several
sequences' new tokens packed into one tensor) carry the page tables and lengths. The "triton"
backend runs the kernels of `mirl.engines.paged.kernels`; the "torch" backend gathers each
sequence's positions from its pages and calls `scaled_dot_product_attention`: the reference the
kernels are checked against, and what a CPU runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Decode:
    """Row b feeds one token at position ctx[b] - 1, which it writes at `slots[b]`."""

    block_table: torch.Tensor  # [rows, max pages] int32
    ctx: torch.Tensor  # [rows] int32: positions after this step's token is written
    slots: torch.Tensor  # [rows] int64
    scratch: Any = None  # kernels.DecodeScratch for split decoding, or None
    out: torch.Tensor | None = None  # [rows, heads, dim] static output buffer (graphs)


@dataclass
class Prefill:
    """Sequence s feeds q_len[s] tokens, the last of its ctx[s] positions, packed from q_start[s]."""

    block_table: torch.Tensor  # [sequences, max pages] int32
    q_start: torch.Tensor  # [sequences] int32
    q_len: torch.Tensor  # [sequences] int32
    ctx: torch.Tensor  # [sequences] int32
    slots: torch.Tensor  # [tokens] int64
    host: list[tuple[int, int, int]] = field(default_factory=list)  # (q_start, q_len, ctx) per sequence
    tile_seq: torch.Tensor | None = None  # the kernel's tile table (kernels.prefill_attention)
    tile_m0: torch.Tensor | None = None


def prefill_tiles(host: list[tuple[int, int, int]], block_m: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    seqs, starts = [], []
    for s, (_, q_len, _) in enumerate(host):
        for m0 in range(0, q_len, block_m):
            seqs.append(s)
            starts.append(m0)
    return (torch.tensor(seqs, dtype=torch.int32, device=device),
            torch.tensor(starts, dtype=torch.int32, device=device))


def _gather(kv: torch.Tensor, table: torch.Tensor, n: int, page: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of the first n positions of one page table: [n, kv heads, dim] each."""
    pos = torch.arange(n, device=kv.device)
    slots = table[pos // page].long() * page + pos % page
    both = kv.index_select(0, slots)
    return both[:, 0], both[:, 1]


def reference(q: torch.Tensor, kv: torch.Tensor, tables: torch.Tensor, seqs: list[tuple[int, int, int]],
              page: int, scale: float) -> torch.Tensor:
    """The attention of packed queries, sequence by sequence (q_start, q_len, ctx), causal."""
    import torch.nn.functional as F

    out = torch.empty_like(q)
    heads, kvh = q.shape[1], kv.shape[2]
    for s, (start, q_len, ctx) in enumerate(seqs):
        k, v = _gather(kv, tables[s], ctx, page)
        k = k.repeat_interleave(heads // kvh, 1).transpose(0, 1)
        v = v.repeat_interleave(heads // kvh, 1).transpose(0, 1)
        qs = q[start:start + q_len].transpose(0, 1)
        qpos = torch.arange(ctx - q_len, ctx, device=q.device)
        mask = torch.arange(ctx, device=q.device)[None, :] <= qpos[:, None]
        out[start:start + q_len] = F.scaled_dot_product_attention(qs, k, v, attn_mask=mask, scale=scale).transpose(0, 1)
    return out


class Attention:
    """The backend: "triton" (kernels) or "torch" (the reference, host-driven)."""

    def __init__(self, backend: str, page: int, scale: float):
        if backend not in ("triton", "torch"):
            raise ValueError(f"attention backend must be triton or torch, got {backend!r}")
        self.backend, self.page, self.scale = backend, page, scale
        if backend == "triton":
            from mirl.engines.paged import kernels

            self.kernels = kernels

    def decode(self, q: torch.Tensor, kv: torch.Tensor, meta: Decode) -> torch.Tensor:
        if self.backend == "triton":
            out = meta.out[:q.shape[0]] if meta.out is not None else torch.empty_like(q)
            return self.kernels.decode_attention(q, kv, meta.block_table, meta.ctx, self.page, self.scale, out,
                                                 meta.scratch)
        seqs = [(b, 1, int(c)) for b, c in enumerate(meta.ctx.tolist())]
        return reference(q, kv, meta.block_table, seqs, self.page, self.scale)

    def prefill(self, q: torch.Tensor, kv: torch.Tensor, meta: Prefill) -> torch.Tensor:
        if self.backend == "triton":
            return self.kernels.prefill_attention(q, kv, meta.block_table, meta.q_start, meta.q_len, meta.ctx,
                                                  meta.tile_seq, meta.tile_m0, self.page, self.scale)
        return reference(q, kv, meta.block_table, meta.host, self.page, self.scale)
