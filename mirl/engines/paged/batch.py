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

Prefill passes and their rows' first tokens run on a second CUDA stream, beside the decode steps: a decode
step of a few dozen rows leaves most of the GPU's arithmetic idle, and a pass of thousands of tokens would
otherwise stall every decoding row for its whole length. The engine reads a pass's first tokens when they
are back (`Flight.ready`) instead of waiting for them. Nothing either stream writes is read by the other
before the host has seen it done: a pass writes pages no decoding row holds (fresh ones, or pages the host
freed after reading the last step that wrote them), and new rows join the decode steps only once their
pass's first tokens (and the copies of their partial pages) have come back. Each stream's graphs have their
own memory pool and were captured on their own capture stream (cuBLAS keeps a workspace per stream, which
a graph captures: graphs that may run at once must not share one).

What the host decides for a step or a pass (tokens, positions, page tables, a new layout of the rows,
their sampling settings, the first tokens' inputs) crosses in one copy of one packed buffer (`Staging`),
and a step's tokens come back in one: each torch call on the owner thread costs a wait for the GIL
while episode threads run Python, so the host side makes as few calls as it can. For the same reason
what the device does with it is a graph replay too on a GPU: a new layout of the rows and a pass's first
tokens (the rows' partial pages copied, their first tokens sampled), one graph per bucket of rows.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mirl.engines.compile_lock import COMPILE_LOCK
from mirl.engines.paged.attention import Attention, Decode, Prefill
from mirl.engines.paged.model import PagedModel

log = logging.getLogger(__name__)

# decode batch sizes graphs are captured for; no bucket of 1, whose shapes torch.compile would compile again
BUCKETS = (2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512)
PREFILL_BLOCK = 64  # query rows per program of the prefill kernel
RING = 4  # host buffers per staging area and per read-back (at most two decode steps are in flight)


def float_bits(values: Sequence[float]) -> np.ndarray:
    """float32 values as their bit patterns (int32, widened to int64 in a staging buffer; the device
    narrows them back to int32 and views them as float32)."""
    return np.asarray(values, dtype=np.float32).view(np.int32)


class Clock:
    """Counts what the host enqueued on one stream and what it knows has run there (a read-back waited for
    it), so a staging buffer is written again without a wait when its copy is known done."""

    def __init__(self) -> None:
        self.enqueued = self.synced = 0

    def tick(self) -> int:
        self.enqueued += 1
        return self.enqueued


class Staging:
    """Host values for the device in one packed int64 buffer and one copy.

    Why: the owner thread gives the GIL away inside every torch call and must take it back after, which
    while episode threads run Python costs up to the switch interval per call (on a CPU: a 16-element
    `add_` took 0.03 ms alone and 73 ms beside 8 busy Python threads). So a pass's host data is written
    into a numpy view of pinned memory (no torch call), crosses in one copy, and the device-side steps
    (graphs on a GPU) read it from `dev` at offsets fixed per step shape. On a CPU `dev` is written in
    place. A ring of host buffers: one is written again only once its copy is known done."""

    def __init__(self, numel: int, device: torch.device, clock: Clock):
        self.cuda, self.clock = device.type == "cuda", clock
        self.dev = torch.zeros(numel, dtype=torch.long, device=device)
        self.host = [torch.zeros(numel, dtype=torch.long).pin_memory() for _ in range(RING)] if self.cuda else [self.dev]
        self.arrays = [h.numpy() for h in self.host]
        self.sent = [0] * len(self.host)  # the clock at each buffer's last copy
        self.i = 0
        self._views: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}  # (buffer, n): the copy's ends

    def begin(self) -> np.ndarray:
        """The next host buffer to fill."""
        self.i = (self.i + 1) % len(self.host)
        if self.cuda and self.sent[self.i] > self.clock.synced:  # rare: the ring went round before a read-back
            torch.cuda.current_stream(self.dev.device).synchronize()  # (the staging's stream is the current one)
            self.clock.synced = self.clock.enqueued
        return self.arrays[self.i]

    def send(self, n: int) -> torch.Tensor:
        """The first n values of the buffer filled since `begin`, on the device."""
        if self.cuda:
            ends = self._views.get((self.i, n))
            if ends is None:  # slicing is a torch call too: a pass shape's slices are made once
                if len(self._views) > 1024:
                    self._views.clear()
                ends = self._views[self.i, n] = (self.dev[:n], self.host[self.i][:n])
            ends[0].copy_(ends[1], non_blocking=True)
        self.sent[self.i] = self.clock.tick()
        return self.dev


@dataclass
class Layout:
    """The rows of the next decode step when they changed: slot i holds old slot keep[i] (its token to
    feed stays where the device wrote it), then the new rows (their first tokens and page tables); per
    row in the new order its position, steps sampled so far and sampling settings. On the device a
    layout is a fixed function of the bucket (a graph per bucket): the staging holds every slot's fields,
    and the new rows' page tables, which new slots pick by index (the rest of that region is never read)."""

    keep: list[int]
    new_tokens: list[int]
    new_pages: list[list[int]]
    positions: list[int]
    steps: list[int]
    seeds: list[int]
    inv_temperature: list[float]
    top_p: list[float]


@dataclass
class Flight:
    """Launched device work whose tokens (and their logprobs) are on their way back: a decode step's, or a
    prefill pass's first tokens of new rows (none for a pass that completed no prompt)."""

    rows: list[Any]  # one entry per row: the engine's rows in slot order, or the pass's rows
    out: np.ndarray | None  # [>= rows, 2] float64: token id, logprob (a view of a pinned ring buffer on a GPU)
    mark: int  # its stream's clock when it was launched
    event: Any = None
    clock: Clock | None = None  # its stream's

    def ready(self) -> bool:
        """Whether it has run (a torch call on a GPU: the engine asks while it has other work)."""
        return self.event is None or self.event.query()

    def result(self) -> tuple[list[int], list[float]]:
        if self.event is not None:
            self.event.synchronize()
        if self.clock is not None:
            self.clock.synced = max(self.clock.synced, self.mark)
        if not self.rows:
            return [], []
        pairs = self.out[:len(self.rows)].tolist()  # numpy: no torch call, the GIL kept
        return [int(t) for t, _ in pairs], [lp for _, lp in pairs]


class DeviceBatch:
    def __init__(self, pm: PagedModel, attn: Attention, kv: torch.Tensor, *, max_rows: int, width: int, page: int,
                 prefill_tokens: int, max_seqs: int, graphs: bool, sample: Callable, token_hash: torch.Tensor,
                 compiled: bool = False, gpu_timing: bool = False):
        self.pm, self.attn, self.kv, self.page, self.width = pm, attn, kv, page, width
        self.device = kv.device
        self.graphs, self.compiled = graphs, compiled
        self.padded = graphs  # decode steps padded to a bucket (what graphs replay); tests set it on a CPU
        self.sample, self.token_hash = sample, token_hash
        self.max_rows, self.max_seqs = max_rows, max_seqs
        # the prefill pass: up to prefill_tokens tokens, padded to a power of two with graphs
        self.prefill_cap = max(PREFILL_BLOCK, 1 << max(0, (int(prefill_tokens) - 1).bit_length())) if graphs \
            else int(prefill_tokens)
        dev, dt = self.device, pm.dtype
        cuda = dev.type == "cuda"
        self.clock = Clock()  # the decode steps' stream
        self.side_clock = Clock()  # the prefill passes' stream
        # decode steps on a high-priority stream, so the block scheduler runs theirs first when a pass is beside
        self.stream = torch.cuda.Stream(dev, priority=-1) if cuda else None
        self.side_stream = torch.cuda.Stream(dev) if cuda else None
        # decode slots: up to the largest bucket, plus a spare one (index `spare`) that padding reads from
        # and writes to: its page-table row stays zeros (page 0, which nobody reads)
        r = self.bucket_for(max_rows)
        self.spare = r
        # decode: tokens to feed, their positions, positions after them (ctx), tokens sampled so far (steps)
        self.state = torch.zeros(4, r + 1, dtype=torch.long, device=dev)
        self.table = torch.zeros(r + 1, width, dtype=torch.int32, device=dev)
        self.seeds = torch.zeros(r + 1, dtype=torch.long, device=dev)
        self.fparams = torch.ones(2, r + 1, dtype=torch.float32, device=dev)  # inverse temperature, top-p
        self.inv_temperature, self.top_p = self.fparams[0], self.fparams[1]
        self.out = torch.zeros(r + 1, 2, dtype=torch.float64, device=dev)  # a step's (token, logprob) per row
        self.out_host = [torch.zeros(r + 1, 2, dtype=torch.float64).pin_memory() for _ in range(RING)] if cuda else []
        self.out_np = [h.numpy() for h in self.out_host] if cuda else [self.out.numpy()]
        self.out_events = [torch.cuda.Event() for _ in range(RING)] if cuda else []
        self._out_i = 0
        self.attn_out = torch.zeros(r + 1, pm.heads, pm.dim, dtype=dt, device=dev)
        self.bucket = 0  # the rows laid out in the buffers, padded to this
        # a decode step's staging: the page-table entries rows move into (3 x bucket), then a new layout
        self.s_stage = Staging(3 * r + 11 * r + r * width, dev, self.clock)  # what `_stage_layout` writes
        # prefill: per token (id, position, slot); per sequence (q_start, q_len, ctx) and page table, plus
        # an empty one (index max_seqs) for padding tiles; the tile table; the rows whose logits are wanted
        cap, s1 = self.prefill_cap, max_seqs + 1
        self.p_tokens = torch.zeros(3, cap, dtype=torch.long, device=dev)
        self.p_seqs = torch.zeros(3, s1, dtype=torch.int32, device=dev)
        self.p_table = torch.zeros(s1, width, dtype=torch.int32, device=dev)
        self.p_tiles = torch.zeros(2, cap // PREFILL_BLOCK + s1 + 1, dtype=torch.int32, device=dev)
        self.p_last = torch.zeros(max_seqs, dtype=torch.long, device=dev)
        self.p_logits = torch.zeros(max_seqs, pm.vocab, dtype=torch.float32, device=dev)
        self.p_stage = Staging(3 * cap + 3 * s1 + s1 * width + 2 * self.p_tiles.shape[1] + max_seqs, dev,
                               self.side_clock)
        # the first tokens of new rows: per row (logits row, seed, step, inverse temperature, top-p), then
        # the KV slots of their partial last pages to copy (from, to)
        self.r_stage = Staging(5 * r + 2 * r * page, dev, self.side_clock)
        self.r_out = torch.zeros(r, 2, dtype=torch.float64, device=dev)  # their (token, logprob)
        self.r_host = [torch.zeros(r, 2, dtype=torch.float64).pin_memory() for _ in range(RING)] if cuda else []
        self.r_np = [h.numpy() for h in self.r_host] if cuda else [self.r_out.numpy()]
        self.r_events = [torch.cuda.Event() for _ in range(RING)] if cuda else []
        self._r_i = 0
        self._graphs: dict[tuple, Any] = {}
        # per stream ("decode": steps and layouts; "side": passes and first tokens) a graph pool and a capture stream
        self._pool: dict[str, Any] = {}
        self._capture = {lane: torch.cuda.Stream(dev) for lane in ("decode", "side")} if cuda else {}
        self._failed_graphs: list[Any] = []
        self._eager: set[tuple] = set()  # keys whose capture failed
        self._scratch: dict[int, Any] = {}
        self.captured = self.failed_captures = 0
        # GPU seconds of decode steps and prefill passes, from CUDA events read at the next read-back
        # (`gpu_timing`, for benchmarks: the events are two torch calls more a pass)
        self.gpu_timing = gpu_timing and cuda
        self.gpu_s = {"decode": 0.0, "prefill": 0.0}
        self._timed: list[tuple[str, Any, Any]] = []
        if cuda:  # the buffers above were made on the current stream; both streams use them
            torch.cuda.current_stream(dev).synchronize()

    def synchronize(self) -> None:
        """Wait for both streams (stream waits: a device-wide one fails another thread's graph capture)."""
        for stream in (self.stream, self.side_stream):
            if stream is not None:
                stream.synchronize()

    # --- decode ------------------------------------------------------------------------------------

    def bucket_for(self, rows: int) -> int:
        return next((b for b in BUCKETS if b >= rows), rows) if self.padded else max(rows, 1)

    def launch(self, rows: list[Any], nucleus: bool, grown: Sequence[tuple[int, int, int]],
               layout: Layout | None = None) -> Flight:
        """One decode step of `rows` (in slot order); its tokens come back in the returned Flight.
        `grown`: page-table entries (slot, column, page) for pages rows move into at this step; `layout`
        when the rows changed. What the host sends crosses in one copy (`Staging`)."""
        bucket = self.bucket_for(len(rows)) if layout is not None else self.bucket
        a = self.s_stage.begin()
        g = len(grown)
        a[:3 * bucket] = 0
        a[:bucket] = self.spare  # unused entries write a zero into the spare row
        if g:
            a[:g], a[bucket:bucket + g], a[2 * bucket:2 * bucket + g] = zip(*grown)
        n = 3 * bucket
        if layout is not None:
            n = self._stage_layout(a, n, bucket, layout)
        f = self.s_stage.send(n)
        if layout is not None:
            self._run(("layout", bucket), lambda: self._layout(f, 3 * bucket, bucket))
            self.bucket = bucket
        self._timed_run("decode", ("decode", bucket, nucleus), lambda: self._decode(bucket, nucleus))
        mark = self.clock.tick()
        if self.device.type == "cuda":
            i = self._out_i = (self._out_i + 1) % RING
            self.out_host[i].copy_(self.out, non_blocking=True)  # whole (a few KiB): slicing is a torch call
            self.out_events[i].record()
            return Flight(list(rows), self.out_np[i], mark, self.out_events[i], self.clock)
        return Flight(list(rows), self.out_np[0][:bucket].copy(), mark, clock=self.clock)

    def read(self, flight: Flight) -> tuple[list[int], list[float]]:
        """A launched step's (or first tokens') tokens and logprobs, waited for."""
        result = flight.result()
        self._read_timings()
        return result

    def _stage_layout(self, a: np.ndarray, o: int, bucket: int, lay: Layout) -> int:
        """Writes a layout into the staging buffer from offset o: per slot the old slot its token comes
        from, whether it is new (padding too: token 0), its new token, position, position + 1, steps, seed,
        inverse temperature and top-p bits, which new row's page table it takes, whether it is a row (not
        padding); then the new rows' page tables. Returns the end."""
        k, rows, b = len(lay.keep), len(lay.positions), bucket
        a[o:o + 11 * b] = 0
        a[o:o + k] = lay.keep  # new and padding slots read slot 0's token, which they do not use
        a[o + b + k:o + 2 * b] = 1
        a[o + 2 * b + k:o + 2 * b + rows] = lay.new_tokens
        a[o + 3 * b:o + 3 * b + rows] = lay.positions
        a[o + 4 * b:o + 4 * b + rows] = [q + 1 for q in lay.positions]
        a[o + 4 * b + rows:o + 5 * b] = 1  # padding attends to one position (0 would divide by zero)
        a[o + 5 * b:o + 5 * b + rows] = lay.steps
        a[o + 6 * b:o + 6 * b + rows] = lay.seeds
        fl = np.ones((2, b), dtype=np.float32)  # padding samples at T = 1 without top-p
        fl[0, :rows], fl[1, :rows] = lay.inv_temperature, lay.top_p
        a[o + 7 * b:o + 9 * b] = fl.view(np.int32).reshape(-1)
        a[o + 9 * b + k:o + 9 * b + rows] = range(rows - k)  # new rows sit in slots k, k + 1, ...
        a[o + 10 * b:o + 10 * b + rows] = 1
        o, w, new = o + 11 * b, self.width, len(lay.new_pages)
        a[o:o + new * w] = 0
        for i, pages in enumerate(lay.new_pages):
            a[o + i * w:o + i * w + len(pages)] = pages
        return o + new * w

    def _layout(self, f: torch.Tensor, o: int, bucket: int) -> None:
        """Lay the rows out again from the staged layout. Its shapes depend on the bucket alone, so on a
        GPU it is one graph replay, where eagerly it is some sixteen calls. New and padding slots take
        their token from the staging, new slots their page table too, kept ones both from their old slot;
        padding slots get an empty page table. The staged tables are read as a bucket's worth, of which
        only the new rows' were sent: the others are stale and picked by no slot."""
        b, w = bucket, self.width
        perm = f[o:o + b]
        fresh = f[o + b:o + 2 * b].bool()
        tokens = torch.where(fresh, f[o + 2 * b:o + 3 * b], self.state[0, perm])
        self.state[0, :b] = tokens
        self.state[1:4, :b] = f[o + 3 * b:o + 6 * b].view(3, b)
        self.seeds[:b] = f[o + 6 * b:o + 7 * b]
        self.fparams[:, :b] = f[o + 7 * b:o + 9 * b].to(torch.int32).view(torch.float32).view(2, b)
        staged = f[o + 11 * b:o + 11 * b + b * w].view(b, w)[f[o + 9 * b:o + 10 * b]].to(torch.int32)
        table = torch.where(fresh[:, None], staged, self.table[perm])
        self.table[:b] = torch.where(f[o + 10 * b:o + 11 * b].bool()[:, None], table, 0)

    def _decode(self, bucket: int, nucleus: bool) -> None:
        """Give rows entering a page that page, feed each row's token, sample the next, and advance the
        rows' state in place."""
        p, f = self.page, self.s_stage.dev
        self.table.index_put_((f[:bucket], f[bucket:2 * bucket]), f[2 * bucket:3 * bucket].to(torch.int32))
        tokens, positions, ctx, steps = self.state[0, :bucket], self.state[1, :bucket], self.state[2, :bucket], \
            self.state[3, :bucket]
        table = self.table[:bucket]
        slots = table.gather(1, (positions // p)[:, None]).squeeze(1).long() * p + positions % p
        meta = Decode(block_table=table, ctx=ctx, slots=slots, scratch=self._scratch_for(bucket),
                      out=self.attn_out[:bucket])
        hidden = self.pm.forward(tokens, positions, slots, self.kv, lambda q, kv: self.attn.decode(q, kv, meta))
        tok, lp = self.sample(self.pm.logits(hidden), self.seeds[:bucket], steps, self.inv_temperature[:bucket],
                              self.top_p[:bucket], self.token_hash, nucleus)
        self.out[:bucket, 0].copy_(tok)
        self.out[:bucket, 1].copy_(lp)
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
            self._scratch[splits] = DecodeScratch(self.spare, self.pm.heads, self.pm.dim, splits, self.device)
        return self._scratch[splits]

    # --- first tokens ------------------------------------------------------------------------------

    def first_tokens(self, which: Sequence[int], seeds: Sequence[int], inv_temperature: Sequence[float],
                     top_p: Sequence[float], copy_from: Sequence[int], copy_to: Sequence[int]) -> Flight:
        """New rows' first tokens, row i sampled from row `which[i]` of the last prefill pass's logits (its
        prompt's last) with its own seed at step 0, and the KV of the rows' partial last pages copied slot by
        slot (each row owns that page from now on). The host's part is one staging copy, the step (a graph
        replay on a GPU, per bucket of rows: padding rows sample from row 0, padding copies move slot 0 onto
        itself) and one read-back, for every row that starts: the returned Flight's tokens, waited for by whoever
        reads them (launch it in `side()`: it follows the pass on the side stream)."""
        k, m = len(which), len(copy_from)
        kb = self.bucket_for(k)
        mb = kb * self.page if self.padded else m  # a row copies less than a page
        assert m <= mb, (m, mb)
        a = self.r_stage.begin()
        a[:5 * kb + 2 * mb] = 0
        a[:k], a[kb:kb + k] = which, seeds
        a[3 * kb:5 * kb] = float_bits([1.0] * (2 * kb))  # padding rows: T = 1, no top-p
        a[3 * kb:3 * kb + k], a[4 * kb:4 * kb + k] = float_bits(inv_temperature), float_bits(top_p)
        a[5 * kb:5 * kb + m], a[5 * kb + mb:5 * kb + mb + m] = copy_from, copy_to
        self.r_stage.send(5 * kb + 2 * mb)
        nucleus = any(t < 1 for t in top_p)
        self._run(("first", kb, nucleus), lambda: self._first(kb, mb, nucleus))
        return self._flight(list(which))

    def pass_done(self) -> Flight:
        """A mark after a pass that completed no prompt: when it is ready, its staging may be written again."""
        return self._flight([])

    def _flight(self, rows: list[Any]) -> Flight:
        mark = self.side_clock.tick()
        if self.device.type != "cuda":
            return Flight(rows, self.r_np[0][:len(rows)].copy(), mark, clock=self.side_clock)
        i = self._r_i = (self._r_i + 1) % RING
        if rows:
            self.r_host[i].copy_(self.r_out, non_blocking=True)  # whole (a few KiB): slicing is a torch call
        self.r_events[i].record()
        return Flight(rows, self.r_np[i], mark, self.r_events[i], self.side_clock)

    def side(self):
        """The context prefill passes and first tokens are launched in: the side stream on a GPU."""
        return torch.cuda.stream(self.side_stream) if self.side_stream is not None else contextlib.nullcontext()

    def _first(self, kb: int, mb: int, nucleus: bool) -> None:
        f = self.r_stage.dev
        per_slot = self.kv[:, 0].numel() * self.kv.element_size()
        chunk = max(1, (64 << 20) // per_slot)  # the gather's temporary stays under 64 MiB
        for c in range(0, mb, chunk):
            e = min(mb, c + chunk)
            self.kv[:, f[5 * kb + mb + c:5 * kb + mb + e]] = self.kv[:, f[5 * kb + c:5 * kb + e]]
        fl = f[3 * kb:5 * kb].to(torch.int32).view(torch.float32)
        tok, lp = self.sample(self.p_logits[f[:kb]], f[kb:2 * kb], f[2 * kb:3 * kb], fl[:kb], fl[kb:],
                              self.token_hash, nucleus)
        self.r_out[:kb, 0].copy_(tok)
        self.r_out[:kb, 1].copy_(lp)

    # --- prefill -----------------------------------------------------------------------------------

    def _p_offsets(self, size: int, tiles: int) -> tuple[int, int, int, int, int]:
        """Where a pass of `size` tokens and `tiles` kernel programs keeps each field in its staging
        buffer: tokens (3 x size), sequences (3 x s1), page tables (s1 x width), tiles (2 x tiles), the
        rows whose logits are wanted (max_seqs); and the end."""
        s1 = self.max_seqs + 1
        seq = 3 * size
        table = seq + 3 * s1
        tile = table + s1 * self.width
        last = tile + 2 * tiles
        return seq, table, tile, last, last + self.max_seqs

    def prefill(self, ids: list[int], positions: list[int], slots: list[int],
                seqs: list[tuple[int, int, int, list[int]]], last: list[int]) -> None:
        """One pass over packed new tokens: sequence s owns tokens q_start..q_start+q_len of the pass,
        the last of its ctx positions, in `pages`; the logits of the tokens at indices `last` land in rows
        0.. of `p_logits` (float32), where `first_tokens` reads them. The host's part is one staging copy and
        the pass."""
        n, s = len(ids), len(seqs)
        assert n <= self.prefill_cap and s <= self.max_seqs, (n, s)
        size = max(2, n) if not self.graphs else max(PREFILL_BLOCK, 1 << (n - 1).bit_length())
        host = [(q0, ql, c) for q0, ql, c, _ in seqs]
        tiles = self._tiles(host, size, self.max_seqs)
        seq, table, tile, lst, end = self._p_offsets(size, tiles)
        s1, w = self.max_seqs + 1, self.width
        a = self.p_stage.begin()
        a[:end] = 0  # padding tokens go to slot 0 of page 0, unused sequences are empty
        a[:n], a[size:size + n], a[2 * size:2 * size + n] = ids, positions, slots
        for i, (q0, ql, c, pages) in enumerate(seqs):
            a[seq + i], a[seq + s1 + i], a[seq + 2 * s1 + i] = q0, ql, c
            a[table + i * w:table + i * w + len(pages)] = pages
        if self.attn.backend == "triton":
            a[tile:tile + 2 * tiles] = np.asarray(prefill_tiles_host(host, PREFILL_BLOCK, tiles, self.max_seqs)).reshape(-1)
        a[lst:lst + len(last)] = last
        self.p_stage.send(end)
        self._host_seqs = host
        self._timed_run("prefill", ("prefill", size, tiles), lambda: self._prefill(size, tiles))

    def _tiles(self, host, size: int, empty: int) -> int:
        """Programs of the prefill kernel: fixed per pass size with graphs (real tiles, then padding)."""
        if self.graphs:
            return size // PREFILL_BLOCK + self.max_seqs + 1
        return sum(-(-ql // PREFILL_BLOCK) for _, ql, _ in host)

    def _prefill(self, size: int, tiles: int) -> None:
        f, s1 = self.p_stage.dev, self.max_seqs + 1
        seq, table, tile, lst, _ = self._p_offsets(size, tiles)
        self.p_tokens[:, :size].copy_(f[:3 * size].view(3, size))
        self.p_seqs.copy_(f[seq:table].view(3, s1))
        self.p_table.copy_(f[table:tile].view(s1, self.width))
        if tiles and self.attn.backend == "triton":
            self.p_tiles[:, :tiles].copy_(f[tile:lst].view(2, tiles))
        self.p_last.copy_(f[lst:lst + self.max_seqs])
        ids, positions, slots = self.p_tokens[0, :size], self.p_tokens[1, :size], self.p_tokens[2, :size]
        meta = Prefill(block_table=self.p_table, q_start=self.p_seqs[0], q_len=self.p_seqs[1],
                       ctx=self.p_seqs[2], slots=slots, host=self._host_seqs,
                       tile_seq=self.p_tiles[0, :tiles], tile_m0=self.p_tiles[1, :tiles])
        hidden = self.pm.forward(ids, positions, slots, self.kv, lambda q, kv: self.attn.prefill(q, kv, meta))
        self.p_logits.copy_(self.pm.logits(hidden[self.p_last]).float())

    # --- graphs ------------------------------------------------------------------------------------

    def _timed_run(self, what: str, key: tuple, step: Callable[[], None]) -> None:
        if not self.gpu_timing:
            self._run(key, step)
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self._run(key, step)
        end.record()
        self._timed.append((what, start, end))

    def _read_timings(self) -> None:
        """Add the GPU time of every timed step or pass that has run (called after a read-back)."""
        while self._timed and self._timed[0][2].query():
            what, start, end = self._timed.pop(0)
            self.gpu_s[what] += start.elapsed_time(end) / 1e3

    def _run(self, key: tuple, step: Callable[[], None]) -> None:  # noqa: C901 - one path, commented
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
        lane = "side" if key[0] in ("prefill", "first") else "decode"
        with COMPILE_LOCK:
            # the warm-up on the lane's capture stream, not a new one: torch hands streams out from a ring of
            # 32, so a new one each time would soon be the other lane's capture stream, whose cuBLAS workspace
            # the other lane's graphs, maybe running now, use
            warm = self._capture[lane]
            warm.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(warm):
                step()
            torch.cuda.current_stream(self.device).wait_stream(warm)
            graph = torch.cuda.CUDAGraph()
            if self._pool.get(lane) is None:
                self._pool[lane] = torch.cuda.graph_pool_handle()
            before = torch.cuda.current_stream(self.device)
            try:
                with torch.cuda.graph(graph, pool=self._pool[lane], stream=self._capture[lane],
                                      capture_error_mode="thread_local"):
                    step()
            except BaseException as e:
                # a capture that failed to end leaves the capture stream current
                torch.cuda.set_stream(before)
                self._abandon_pool(graph, lane)
                if not isinstance(e, Exception):  # an interrupt: nothing to fall back for
                    raise
                self._eager.add(key)
                log.warning("paged engine: capture of %s failed, it runs eagerly from now on: %s: %s",
                            key, type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
                return  # this step's outputs are the warm-up's (a capture runs nothing; a step must not run twice)
        self._graphs[key] = graph
        self.captured += 1

    def _abandon_pool(self, graph, lane: str) -> None:
        """After a failed capture: the pool it recorded into stays marked as recording (torch ends that
        only after a capture that ended well), so every later capture into it would fail too. End the
        recording where torch lets us, and capture later graphs into a new pool; the failed graph is
        kept, since the allocator's filter for that pool points at it."""
        end = getattr(torch._C, "_cuda_endAllocateToPool", None)
        if end is not None and self._pool.get(lane) is not None:
            try:
                end(self.device.index if self.device.index is not None else torch.cuda.current_device(), self._pool[lane])
            except Exception as e:  # best effort: a private torch call whose signature may change
                log.warning("paged engine: could not end the failed capture's pool: %s", e)
        self._failed_graphs.append(graph)
        self._pool[lane] = None
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

