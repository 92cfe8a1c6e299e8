"""The device side of the paged engine: the KV pages, the static buffers, the decode and prefill passes
and their CUDA graphs. The engine (`engine.py`) decides what runs; this module runs it.

Decode steps are pipelined: a step samples each row's next token and writes it, with the row's
advanced position, into the buffers the next step reads, so the host launches step t + 1 before it
reads step t's tokens back, and does its bookkeeping while the GPU decodes. A row that ended at step
t (a stop id only the host sees) runs one step more, whose output is dropped; its pages are freed
only after that step is done (`engine.py`).

Prefill passes pack up to `max_seqs` sequences' new tokens (up to `prefill_tokens`) into one forward;
on a GPU the pass is padded to a power-of-two number of tokens and replayed as a CUDA graph too
(an eager pass launches some 10 kernels a layer from Python: milliseconds for a few hundred tokens).
Padding tokens go to page 0, which nobody reads; padding tiles of the attention point at an empty
sequence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mirl.engines.compile_lock import COMPILE_LOCK
from mirl.engines.paged.attention import Attention, Decode, Prefill
from mirl.engines.paged.model import PagedModel

log = logging.getLogger(__name__)

# decode batch sizes graphs are captured for; no bucket of 1, whose shapes torch.compile would compile again
BUCKETS = (2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512)
PREFILL_BLOCK = 64  # query rows per program of the prefill kernel


@dataclass
class Flight:
    """A launched decode step whose tokens are on their way back."""

    rows: list[Any]  # the engine's rows, in slot order
    tokens: torch.Tensor
    logprobs: torch.Tensor
    event: Any = None

    def result(self) -> tuple[list[int], list[float]]:
        if self.event is not None:
            self.event.synchronize()
        n = len(self.rows)
        return self.tokens[:n].tolist(), self.logprobs[:n].tolist()


class DeviceBatch:
    def __init__(self, pm: PagedModel, attn: Attention, kv: torch.Tensor, *, max_rows: int, width: int, page: int,
                 prefill_tokens: int, max_seqs: int, graphs: bool, sample: Callable, token_hash: torch.Tensor,
                 compiled: bool = False):
        self.pm, self.attn, self.kv, self.page, self.width = pm, attn, kv, page, width
        self.device = kv.device
        self.graphs, self.compiled = graphs, compiled
        self.sample, self.token_hash = sample, token_hash
        self.max_rows, self.max_seqs = max_rows, max_seqs
        # the prefill pass: up to prefill_tokens tokens, padded to a power of two with graphs
        self.prefill_cap = 1 << max(0, (int(prefill_tokens) - 1).bit_length()) if graphs else int(prefill_tokens)
        dev, dt = self.device, pm.dtype
        # decode: tokens to feed, their positions, positions after them (ctx), tokens sampled so far (steps)
        self.state = torch.zeros(4, max_rows, dtype=torch.long, device=dev)
        self.table = torch.zeros(max_rows, width, dtype=torch.int32, device=dev)
        self.seeds = torch.zeros(max_rows, dtype=torch.long, device=dev)
        self.inv_temperature = torch.ones(max_rows, dtype=torch.float32, device=dev)
        self.top_p = torch.ones(max_rows, dtype=torch.float32, device=dev)
        self.out_tokens = torch.zeros(max_rows, dtype=torch.long, device=dev)
        self.out_logprobs = torch.zeros(max_rows, dtype=torch.float32, device=dev)
        self.attn_out = torch.zeros(max_rows, pm.heads, pm.dim, dtype=dt, device=dev)
        self.rows = 0  # rows laid out in the buffers (slots 0..rows-1), padded to `bucket`
        self.bucket = 0
        # prefill: per token (id, position, slot); per sequence (q_start, q_len, ctx) and page table, plus
        # an empty one (index max_seqs) for padding tiles; the tile table; the rows whose logits are wanted
        cap, s1 = self.prefill_cap, max_seqs + 1
        self.p_tokens = torch.zeros(3, cap, dtype=torch.long, device=dev)
        self.p_seqs = torch.zeros(3, s1, dtype=torch.int32, device=dev)
        self.p_table = torch.zeros(s1, width, dtype=torch.int32, device=dev)
        self.p_tiles = torch.zeros(2, cap // PREFILL_BLOCK + s1 + 1, dtype=torch.int32, device=dev)
        self.p_last = torch.zeros(max_seqs, dtype=torch.long, device=dev)
        self.p_logits = torch.zeros(max_seqs, pm.vocab, dtype=torch.float32, device=dev)
        self._graphs: dict[tuple, Any] = {}
        self._pool = None
        self._failed_graphs: list[Any] = []
        self._eager: set[tuple] = set()  # keys whose capture failed
        self._scratch: dict[int, Any] = {}
        self.captured = self.failed_captures = 0

    # --- host -> device ----------------------------------------------------------------------------

    def _put(self, values, dtype) -> torch.Tensor:
        """A host list on the device without waiting for the GPU (pinned staging on a GPU)."""
        t = torch.as_tensor(values, dtype=dtype)
        if self.device.type == "cuda":
            return t.pin_memory().to(self.device, non_blocking=True)
        return t

    # --- decode ------------------------------------------------------------------------------------

    def bucket_for(self, rows: int) -> int:
        return next((b for b in BUCKETS if b >= rows), rows) if self.graphs else max(rows, 1)

    def layout(self, keep: Sequence[int], new: Sequence[dict], positions: Sequence[int], steps: Sequence[int]) -> None:
        """Lay the rows out again: slot i holds old slot keep[i] (its token to feed stays where the
        GPU wrote it), then the `new` rows (dicts: token, pages, seed, inv_temperature, top_p);
        `positions` and `steps` for every row in the new order; the rest of the bucket is padding."""
        rows = len(keep) + len(new)
        bucket = self.bucket_for(rows)
        pad = bucket - rows
        perm = self._put(list(keep) + [0] * (len(new) + pad), torch.long)
        pos = list(positions) + [0] * pad
        pack = self._put([pos, [p + 1 for p in pos], list(steps) + [0] * pad,
                          [0] * len(keep) + [r["token"] for r in new] + [0] * pad], torch.long)
        is_new = self._put([False] * len(keep) + [True] * len(new) + [False] * pad, torch.bool)
        tokens = torch.where(is_new, pack[3], self.state[0, perm])
        tokens[rows:] = 0
        self.state[0, :bucket] = tokens
        self.state[1:4, :bucket] = pack[:3]
        table = self.table[perm]
        table[len(keep):] = 0
        if new:
            block = torch.zeros(len(new), self.width, dtype=torch.int32)
            for i, r in enumerate(new):
                block[i, :len(r["pages"])] = torch.as_tensor(r["pages"], dtype=torch.int32)
            table[len(keep):rows] = self._put(block, torch.int32)
        self.table[:bucket] = table
        for buf, key, fill in ((self.seeds, "seed", 0), (self.inv_temperature, "inv_temperature", 1.0),
                               (self.top_p, "top_p", 1.0)):
            moved = buf[perm]
            if new:
                moved[len(keep):rows] = self._put([r[key] for r in new], buf.dtype)
            moved[rows:] = fill
            buf[:bucket] = moved
        self.rows, self.bucket = rows, bucket

    def grow(self, entries: Sequence[tuple[int, int, int]]) -> None:
        """Page-table entries (slot, column, page) for pages rows move into at their next step."""
        if entries:
            e = self._put(list(zip(*entries)), torch.long)
            self.table[e[0], e[1]] = e[2].to(torch.int32)

    def launch(self, rows: list[Any], nucleus: bool) -> Flight:
        """One decode step of the laid-out rows; its tokens come back in the returned Flight."""
        self._run(("decode", self.bucket, nucleus), lambda: self._decode(self.bucket, nucleus))
        n = self.bucket
        if self.device.type == "cuda":
            tokens = torch.empty(n, dtype=torch.long, pin_memory=True)
            logprobs = torch.empty(n, dtype=torch.float32, pin_memory=True)
            tokens.copy_(self.out_tokens[:n], non_blocking=True)
            logprobs.copy_(self.out_logprobs[:n], non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            return Flight(list(rows), tokens, logprobs, event)
        return Flight(list(rows), self.out_tokens[:n].clone(), self.out_logprobs[:n].clone())

    def _decode(self, bucket: int, nucleus: bool) -> None:
        """Feed each row's token, sample the next, and advance the rows' state in place."""
        p = self.page
        tokens, positions, ctx, steps = self.state[0, :bucket], self.state[1, :bucket], self.state[2, :bucket], \
            self.state[3, :bucket]
        table = self.table[:bucket]
        slots = table.gather(1, (positions // p)[:, None]).squeeze(1).long() * p + positions % p
        meta = Decode(block_table=table, ctx=ctx, slots=slots, scratch=self._scratch_for(bucket),
                      out=self.attn_out[:bucket])
        hidden = self.pm.forward(tokens, positions, slots, self.kv, lambda q, kv: self.attn.decode(q, kv, meta))
        tok, lp = self.sample(self.pm.logits(hidden), self.seeds[:bucket], steps, self.inv_temperature[:bucket],
                              self.top_p[:bucket], self.token_hash, nucleus)
        self.out_tokens[:bucket].copy_(tok)
        self.out_logprobs[:bucket].copy_(lp)
        self.state[0, :bucket].copy_(tok)
        self.state[1:4, :bucket] += 1

    def _scratch_for(self, bucket: int):
        if self.attn.backend != "triton":
            return None
        from mirl.engines.paged.kernels import DecodeScratch, decode_splits

        sms = torch.cuda.get_device_properties(self.device).multi_processor_count if self.device.type == "cuda" else 8
        splits = decode_splits(bucket, self.pm.kv_heads, self.width * self.page, sms)
        if splits == 1:
            return None
        if splits not in self._scratch:
            self._scratch[splits] = DecodeScratch(self.max_rows, self.pm.heads, self.pm.dim, splits, self.device)
        return self._scratch[splits]

    # --- prefill -----------------------------------------------------------------------------------

    def prefill(self, ids: list[int], positions: list[int], slots: list[int],
                seqs: list[tuple[int, int, int, list[int]]], last: list[int]) -> torch.Tensor:
        """One pass over packed new tokens: sequence s owns tokens q_start..q_start+q_len of the pass,
        the last of its ctx positions, in `pages`; returns the logits [len(last), vocab] of the tokens at
        indices `last` (float32, on the device)."""
        n, s = len(ids), len(seqs)
        assert n <= self.prefill_cap and s <= self.max_seqs, (n, s)
        size = max(2, n) if not self.graphs else max(PREFILL_BLOCK, 1 << (n - 1).bit_length())
        pad = size - n
        self.p_tokens[:, :size] = self._put([ids + [0] * pad, positions + [0] * pad, slots + [0] * pad], torch.long)
        empty = self.max_seqs  # the empty sequence padding tiles point at
        cols = [[q0 for q0, _, _, _ in seqs], [ql for _, ql, _, _ in seqs], [c for _, _, c, _ in seqs]]
        self.p_seqs[:, :s + 1] = self._put([c + [0] for c in cols], torch.int32)
        block = torch.zeros(s, self.width, dtype=torch.int32)
        for i, (_, _, _, pages) in enumerate(seqs):
            block[i, :len(pages)] = torch.as_tensor(pages, dtype=torch.int32)
        self.p_table[:s] = self._put(block, torch.int32)
        host = [(q0, ql, c) for q0, ql, c, _ in seqs]
        tiles = self._tiles(host, size, empty)
        self.p_last.zero_()
        self.p_last[:len(last)] = self._put(last, torch.long)
        if self.attn.backend == "triton":
            self.p_tiles[:, :tiles] = self._put(prefill_tiles_host(host, PREFILL_BLOCK, tiles, empty), torch.int32)
        self._host_seqs = host
        self._run(("prefill", size, tiles), lambda: self._prefill(size, tiles))
        return self.p_logits[:len(last)]

    def _tiles(self, host, size: int, empty: int) -> int:
        """Programs of the prefill kernel: fixed per pass size with graphs (real tiles, then padding)."""
        if self.graphs:
            return size // PREFILL_BLOCK + self.max_seqs + 1
        return sum(-(-ql // PREFILL_BLOCK) for _, ql, _ in host)

    def _prefill(self, size: int, tiles: int) -> None:
        ids, positions, slots = self.p_tokens[0, :size], self.p_tokens[1, :size], self.p_tokens[2, :size]
        s1 = self.max_seqs + 1
        meta = Prefill(block_table=self.p_table[:s1], q_start=self.p_seqs[0, :s1], q_len=self.p_seqs[1, :s1],
                       ctx=self.p_seqs[2, :s1], slots=slots, host=self._host_seqs,
                       tile_seq=self.p_tiles[0, :tiles], tile_m0=self.p_tiles[1, :tiles])
        hidden = self.pm.forward(ids, positions, slots, self.kv, lambda q, kv: self.attn.prefill(q, kv, meta))
        self.p_logits.copy_(self.pm.logits(hidden[self.p_last]).float())

    # --- graphs ------------------------------------------------------------------------------------

    def _run(self, key: tuple, step: Callable[[], None]) -> None:
        """Run `step`, replaying its CUDA graph when there is one (captured on its first run: that run
        goes eagerly, compiling the first time, then the capture, which runs nothing). Compiling and
        capturing hold the process's `COMPILE_LOCK` (other engines, the learner). A key whose capture
        failed runs eagerly from then on: slower, but its requests are served and it is not captured
        again at every step. The warm-up's outputs are the step's either way: a decode step advances
        the rows' positions and feeds its token back, so it runs exactly once."""
        if not self.graphs or key in self._eager:
            if self.compiled:
                with COMPILE_LOCK:
                    step()
            else:
                step()
            return
        graph = self._graphs.get(key)
        if graph is not None:
            graph.replay()
            return
        with COMPILE_LOCK:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                step()
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            before = torch.cuda.current_stream(self.device)
            try:
                with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                    step()
            except BaseException as e:
                # a capture that failed to end leaves torch's capture stream (one for the process) current
                torch.cuda.set_stream(before)
                self._abandon_pool(graph)
                if not isinstance(e, Exception):  # an interrupt: nothing to fall back for
                    raise
                self._eager.add(key)
                log.warning("paged engine: capture of %s failed, it runs eagerly from now on: %s: %s",
                            key, type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
                return  # this step's outputs are the warm-up's (a capture runs nothing; a step must not run twice)
        self._graphs[key] = graph
        self.captured += 1

    def _abandon_pool(self, graph) -> None:
        """After a failed capture: the pool it recorded into stays marked as recording (torch ends that
        only after a capture that ended well), so every later capture into it would fail too. End the
        recording where torch lets us, and capture later graphs into a new pool; the failed graph is
        kept, since the allocator's filter for that pool points at it."""
        end = getattr(torch._C, "_cuda_endAllocateToPool", None)
        if end is not None and self._pool is not None:
            try:
                end(self.device.index if self.device.index is not None else torch.cuda.current_device(), self._pool)
            except Exception as e:  # best effort: a private torch call whose signature may change
                log.warning("paged engine: could not end the failed capture's pool: %s", e)
        self._failed_graphs.append(graph)
        self._pool = None
        self.failed_captures += 1


def prefill_tiles_host(host: list[tuple[int, int, int]], block: int, tiles: int, empty: int) -> list[list[int]]:
    """The tile table (sequence, first query row) of a pass, padded to `tiles` with the empty sequence."""
    seqs, starts = [], []
    for s, (_, q_len, _) in enumerate(host):
        for m0 in range(0, q_len, block):
            seqs.append(s)
            starts.append(m0)
    pad = tiles - len(seqs)
    assert pad >= 0, (tiles, len(seqs))
    return [seqs + [empty] * pad, starts + [0] * pad]

