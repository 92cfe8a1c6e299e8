"""Attention over paged KV in Triton: one kernel for decode steps, one for packed prefill chunks.

Decode (one query per sequence, flash-decoding): a program per (sequence, KV head, split) takes the
G query heads that share the KV head as the rows of one tile, so each KV element is read once for
the G heads; the sequence's positions are split over programs when there are too few sequences to
fill the GPU, and a second kernel combines the splits. Every bound is read from device memory (the
context lengths), so a CUDA graph captured once serves every length.

Prefill (several sequences' new tokens packed in one tensor): a program per (query tile, head), the
tile table mapping programs to sequences is built on the host; causal within the chunk, full over
the sequence's earlier positions, which come from its pages.

KV layout, per layer: [slots, 2, kv heads, head dim], slot = page * page size + offset. Float32 runs
its dots as three TF32 products on a GPU ("tf32x3": tensor cores, to about float32's accuracy; IEEE
dots run on the CUDA cores: in the rate stage on one H100, SmolLM2 in float32 at ~1,700-token contexts,
a prefill pass of ~17 new tokens took 15.1 ms of GPU time with IEEE dots and 5.6 ms with these, a
decode step 5.0 and 3.8 ms) and in IEEE precision in Triton's interpreter on a CPU
(`TRITON_INTERPRET=1`), where the tests compare with the float32 reference.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _tile(q, KV, slot, kh, d, ok, keep, m, lse, acc, scale, s_kvs, s_kvkv, s_kvh, PREC: tl.constexpr):
    """One tile of positions (their slots, `ok` where real) in the online softmax of the rows of `q`:
    scores where `keep`, the running max `m`, sum `lse` and output `acc` updated."""
    kp = KV + slot[:, None] * s_kvs + kh * s_kvh + d[None, :]
    k = tl.load(kp, mask=ok[:, None], other=0.0)
    if PREC == "":
        s = tl.dot(q, tl.trans(k)) * scale
    else:
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * scale
    s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 1))
    p = tl.exp(s - m_new[:, None])
    alpha = tl.exp(m - m_new)
    v = tl.load(kp + s_kvkv, mask=ok[:, None], other=0.0)
    if PREC == "":
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
    return m_new, lse * alpha + tl.sum(p, 1), acc


@triton.jit
def _decode_kernel(Q, KV, BT, CTX, OUT, ML, scale,
                   s_qb, s_qh, s_kvs, s_kvkv, s_kvh, s_btb, s_ob, s_oh, s_os, s_mb, s_mh,
                   G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                   BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, PREC: tl.constexpr):
    b = tl.program_id(0)
    kh = tl.program_id(1)
    sp = tl.program_id(2)
    ctx = tl.load(CTX + b)
    chunk = tl.cdiv(tl.cdiv(ctx, SPLIT), BLOCK_N) * BLOCK_N
    start = sp * chunk
    end = tl.minimum(ctx, start + chunk)
    g = tl.arange(0, GP)
    d = tl.arange(0, D)
    heads = kh * G + g
    q = tl.load(Q + b * s_qb + heads[:, None] * s_qh + d[None, :], mask=(g < G)[:, None], other=0.0)
    m = tl.full([GP], float("-inf"), tl.float32)
    lse = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, D], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        t = n0 + tl.arange(0, BLOCK_N)
        ok = t < end
        page = tl.load(BT + b * s_btb + t // PAGE, mask=ok, other=0)
        slot = page.to(tl.int64) * PAGE + t % PAGE
        m, lse, acc = _tile(q, KV, slot, kh, d, ok, ok[None, :], m, lse, acc, scale, s_kvs, s_kvkv, s_kvh, PREC)
    keep = (g < G)[:, None]
    op = OUT + b * s_ob + heads[:, None] * s_oh + sp * s_os + d[None, :]
    if SPLIT == 1:
        tl.store(op, (acc / lse[:, None]).to(OUT.dtype.element_ty), mask=keep)
    else:
        tl.store(op, acc, mask=keep)
        mp = ML + b * s_mb + heads * s_mh + sp * 2
        tl.store(mp, m, mask=g < G)
        tl.store(mp + 1, lse, mask=g < G)


@triton.jit
def _combine_kernel(P, ML, OUT, s_pb, s_ph, s_ps, s_mb, s_mh, s_ob, s_oh,
                    SPLIT: tl.constexpr, SP: tl.constexpr, D: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    sp = tl.arange(0, SP)
    ok = sp < SPLIT
    d = tl.arange(0, D)
    m = tl.load(ML + b * s_mb + h * s_mh + sp * 2, mask=ok, other=float("-inf"))
    lse = tl.load(ML + b * s_mb + h * s_mh + sp * 2 + 1, mask=ok, other=0.0)
    top = tl.max(m, 0)
    w = tl.where(ok & (lse > 0), tl.exp(m - top), 0.0)
    acc = tl.load(P + b * s_pb + h * s_ph + sp[:, None] * s_ps + d[None, :], mask=ok[:, None], other=0.0)
    out = tl.sum(acc * w[:, None], 0) / tl.sum(lse * w, 0)
    tl.store(OUT + b * s_ob + h * s_oh + d, out.to(OUT.dtype.element_ty))


@triton.jit
def _prefill_kernel(Q, KV, BT, QSTART, QLEN, CTX, TSEQ, TM0, OUT, scale,
                    s_qt, s_qh, s_kvs, s_kvkv, s_kvh, s_bts, s_ot, s_oh,
                    G: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
    tile = tl.program_id(0)
    h = tl.program_id(1)
    kh = h // G
    s = tl.load(TSEQ + tile)
    m0 = tl.load(TM0 + tile)
    qs = tl.load(QSTART + s)
    ql = tl.load(QLEN + s)
    ctx = tl.load(CTX + s)
    past = ctx - ql
    r = m0 + tl.arange(0, BLOCK_M)
    rok = r < ql
    d = tl.arange(0, D)
    q = tl.load(Q + (qs + r)[:, None].to(tl.int64) * s_qt + h * s_qh + d[None, :], mask=rok[:, None], other=0.0)
    qpos = past + r
    hi = tl.minimum(ctx, past + m0 + BLOCK_M)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    lse = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for n0 in range(0, hi, BLOCK_N):
        t = n0 + tl.arange(0, BLOCK_N)
        ok = t < hi
        page = tl.load(BT + s * s_bts + t // PAGE, mask=ok, other=0)
        slot = page.to(tl.int64) * PAGE + t % PAGE
        keep = ok[None, :] & (t[None, :] <= qpos[:, None])
        m, lse, acc = _tile(q, KV, slot, kh, d, ok, keep, m, lse, acc, scale, s_kvs, s_kvkv, s_kvh, PREC)
    out = acc / lse[:, None]
    tl.store(OUT + (qs + r)[:, None].to(tl.int64) * s_ot + h * s_oh + d[None, :], out.to(OUT.dtype.element_ty),
             mask=rok[:, None])


def precision(q: torch.Tensor) -> str:
    """The dots' input precision: float32 as three TF32 products on a GPU, IEEE in the interpreter on a
    CPU; other dtypes Triton's default ("")."""
    if q.dtype != torch.float32:
        return ""
    return "tf32x3" if q.is_cuda else "ieee"


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def decode_splits(rows: int, kv_heads: int, max_context: int, sms: int, block_n: int = 64) -> int:
    """How many programs share one sequence's positions: enough programs to fill the GPU twice,
    never a split shorter than two tiles."""
    want = -(-2 * sms // max(1, rows * kv_heads))
    return max(1, min(want, 16, max(1, max_context // (2 * block_n))))


class DecodeScratch:
    """Buffers of the split decode for up to `rows` sequences (allocated once: CUDA graphs read them)."""

    def __init__(self, rows: int, heads: int, head_dim: int, splits: int, device):
        self.splits = splits
        self.part = torch.empty(rows, heads, splits, head_dim, device=device, dtype=torch.float32)
        self.ml = torch.empty(rows, heads, splits, 2, device=device, dtype=torch.float32)


def decode_attention(q: torch.Tensor, kv: torch.Tensor, block_table: torch.Tensor, ctx: torch.Tensor,
                     page: int, scale: float, out: torch.Tensor, scratch: DecodeScratch | None = None,
                     block_n: int = 64, prec: str | None = None) -> torch.Tensor:
    """out[b] = attention of q[b] ([rows, heads, dim]) over the first ctx[b] positions of row b's pages."""
    rows, heads, dim = q.shape
    kvh = kv.shape[2]
    g = heads // kvh
    splits = scratch.splits if scratch is not None else 1
    prec = precision(q) if prec is None else prec  # another only to measure it (engine_bench.py)
    if splits == 1:
        _decode_kernel[(rows, kvh, 1)](
            q, kv, block_table, ctx, out, out, scale,
            q.stride(0), q.stride(1), kv.stride(0), kv.stride(1), kv.stride(2), block_table.stride(0),
            out.stride(0), out.stride(1), 0, 0, 0,
            G=g, GP=max(16, _pow2(g)), D=dim, PAGE=page, BLOCK_N=block_n, SPLIT=1, PREC=prec)
        return out
    part, ml = scratch.part[:rows], scratch.ml[:rows]
    _decode_kernel[(rows, kvh, splits)](
        q, kv, block_table, ctx, part, ml, scale,
        q.stride(0), q.stride(1), kv.stride(0), kv.stride(1), kv.stride(2), block_table.stride(0),
        part.stride(0), part.stride(1), part.stride(2), ml.stride(0), ml.stride(1),
        G=g, GP=max(16, _pow2(g)), D=dim, PAGE=page, BLOCK_N=block_n, SPLIT=splits, PREC=prec)
    _combine_kernel[(rows, heads)](
        part, ml, out, part.stride(0), part.stride(1), part.stride(2), ml.stride(0), ml.stride(1),
        out.stride(0), out.stride(1), SPLIT=splits, SP=_pow2(splits), D=dim)
    return out


def prefill_attention(q: torch.Tensor, kv: torch.Tensor, block_table: torch.Tensor, q_start: torch.Tensor,
                      q_len: torch.Tensor, ctx: torch.Tensor, tile_seq: torch.Tensor, tile_m0: torch.Tensor,
                      page: int, scale: float, block_m: int = 64, block_n: int = 64,
                      prec: str | None = None) -> torch.Tensor:
    """Attention of packed queries q [tokens, heads, dim]: sequence s owns q[q_start[s]:+q_len[s]],
    the last q_len[s] of its ctx[s] positions; the tile table (tile_seq, tile_m0) is `prefill_tiles`."""
    tokens, heads, dim = q.shape
    out = torch.empty_like(q)
    g = heads // kv.shape[2]
    _prefill_kernel[(tile_seq.shape[0], heads)](
        q, kv, block_table, q_start, q_len, ctx, tile_seq, tile_m0, out, scale,
        q.stride(0), q.stride(1), kv.stride(0), kv.stride(1), kv.stride(2), block_table.stride(0),
        out.stride(0), out.stride(1),
        G=g, D=dim, PAGE=page, BLOCK_M=block_m, BLOCK_N=block_n, PREC=precision(q) if prec is None else prec)
    return out
