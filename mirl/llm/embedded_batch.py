"""Continuous batching for the embedded model: concurrent requests decode as one batch.

Why: on a CPU a 135M model's decode step is bound by reading the weights, not by arithmetic, so
8 rows cost about twice one row (measured: 60 ms for 1 row, 120 ms for 8, 2 cores, float32).
Profiling runs several episodes at once; each asks for one step at a time. Serialized, every
request paid a whole weight read per token; batched, they share it.

How: one thread owns the model. A request is prefilled on its own (through the model's prefix
cache), then its rows join the running batch: KV caches of different lengths are left-padded to
a common length, and padded positions are masked out with each row keeping its own positions.
A request leaves the batch when all of its rows are done. Sampling stays per row (each row has
its own generator, seeded by (seed, sample index)), so batching changes which other rows share a
forward pass, never which random numbers a row draws: a lone request runs exactly the
computations it ran before batching existed; one batched with others may differ by float
rounding between batch shapes.
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Request:
    ids: Any  # the prompt, a [1, L] tensor
    indices: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    stops: list[str]
    gens: list[Any] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)
    done: list[bool] = field(default_factory=list)
    reason: list[str] = field(default_factory=list)
    steps: int = 0
    texts: list[str] | None = None
    error: BaseException | None = None
    finished: threading.Event = field(default_factory=threading.Event)

    @property
    def rows(self) -> int:
        return len(self.indices)

    def complete(self) -> bool:
        return all(self.done)


class PaddedKV:
    """The batch's KV cache: per layer [rows, heads, positions, dim], each row left-padded by pad[row]."""

    def __init__(self, new_cache: Callable[[list[tuple[Any, Any]]], Any]):
        self.new_cache = new_cache
        self.cache = None
        self.pad: list[int] = []

    @property
    def length(self) -> int:
        return 0 if not self.pad else self.layers()[0][0].shape[2]

    def layers(self) -> list[tuple[Any, Any]]:
        from mirl.llm.embedded import _kv_layers

        return _kv_layers(self.cache)

    def add(self, kv: list[tuple[Any, Any]]) -> None:
        """Append rows (per layer [r, heads, L, dim]) at the bottom of the batch."""
        import torch

        rows, new_len = kv[0][0].shape[0], kv[0][0].shape[2]
        if not self.pad:
            self.cache, self.pad = self.new_cache(kv), [0] * rows
            return
        old, old_len = self.layers(), self.length
        width = max(old_len, new_len)

        def left(t, n):
            return t if n == 0 else torch.cat([t.new_zeros(*t.shape[:2], n, t.shape[3]), t], dim=2)

        merged = [(torch.cat([left(k0, width - old_len), left(k1, width - new_len)]),
                   torch.cat([left(v0, width - old_len), left(v1, width - new_len)]))
                  for (k0, v0), (k1, v1) in zip(old, kv)]
        self.pad = [p + width - old_len for p in self.pad] + [width - new_len] * rows
        self.cache = self.new_cache(merged)

    def keep(self, rows: list[int]) -> None:
        """Keep only these rows (in this order), dropping columns that are padding in all of them."""
        if not rows:
            self.cache, self.pad = None, []
            return
        if rows == list(range(len(self.pad))):
            return
        import torch

        idx = torch.tensor(rows, device=self.layers()[0][0].device)
        pad = [self.pad[r] for r in rows]
        cut = min(pad)
        self.cache = self.new_cache([(k.index_select(0, idx)[:, :, cut:], v.index_select(0, idx)[:, :, cut:])
                                     for k, v in self.layers()])
        self.pad = [p - cut for p in pad]

    def step_inputs(self, device) -> dict[str, Any]:
        """Attention mask and positions for the next token; none when no row is padded, so an
        unpadded batch runs exactly the forward pass an unbatched one does."""
        if not any(self.pad):
            return {}
        import torch

        length = self.length
        mask = torch.ones(len(self.pad), length + 1, dtype=torch.long, device=device)
        for r, p in enumerate(self.pad):
            mask[r, :p] = 0
        positions = torch.tensor([[length - p] for p in self.pad], dtype=torch.long, device=device)
        return {"attention_mask": mask, "position_ids": positions}


def growing_cache(kv: list[tuple[Any, Any]]):
    """A KV cache holding `kv` (taken as is) that grows in place: decode appends one position per
    step, and transformers' own dynamic cache copies the whole cache to do that (at 16 rows of
    800 positions that copy was a third of the step). Falls back to that cache on transformers
    versions without per-layer cache classes."""
    try:
        from transformers.cache_utils import Cache, DynamicLayer
    except ImportError:
        Cache = DynamicLayer = None
    if DynamicLayer is None or not hasattr(DynamicLayer, "lazy_initialization"):
        from transformers import DynamicCache

        cache = DynamicCache()
        for i, (k, v) in enumerate(kv):
            cache.update(k, v, i)
        return cache
    cache = Cache(layers=[_growing_layer_class(DynamicLayer)() for _ in kv])
    for layer, (k, v) in zip(cache.layers, kv):
        layer.adopt(k, v)
    return cache


_GROWING: dict[type, type] = {}


def _growing_layer_class(base: type) -> type:
    if base in _GROWING:
        return _GROWING[base]

    class GrowingLayer(base):
        """keys/values are views of buffers with spare positions; `update` writes into them."""

        _kb = _vb = None

        def adopt(self, keys, values) -> None:
            self.lazy_initialization(keys, values)
            self._kb, self._vb = keys, values
            self.keys, self.values = keys, values

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            old = self.keys.shape[-2] if self.keys is not None and self.keys.numel() else 0
            new = old + key_states.shape[-2]
            kb = self._kb
            stale = kb is None or self.keys.numel() == 0 or self.keys.data_ptr() != kb.data_ptr()
            if stale or new > kb.shape[-2] or kb.shape[:2] != key_states.shape[:2]:
                cap = new + max(256, new // 2)
                shape = (*key_states.shape[:2], cap, key_states.shape[-1])
                kb, vb = key_states.new_empty(shape), value_states.new_empty(shape)
                if old:
                    kb[:, :, :old], vb[:, :, :old] = self.keys, self.values
                self._kb, self._vb = kb, vb
            self._kb[:, :, old:new] = key_states
            self._vb[:, :, old:new] = value_states
            self.keys, self.values = self._kb[:, :, :new], self._vb[:, :, :new]
            return self.keys, self.values

    _GROWING[base] = GrowingLayer
    return GrowingLayer


class DecodeBatcher:
    """Runs the requests of many threads on one model, batching their decode steps."""

    def __init__(self, lm: Any):
        self.lm = lm
        self.queue: queue.SimpleQueue[Request] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self.max_rows_seen = 0  # the largest batch decoded so far (for benchmarks and tests)
        # where the decode thread's time went: prefill, decode forward passes, sampling, batch
        # bookkeeping (padding and dropping rows); and how many forward passes and row-steps ran
        self.stats = {"prefill_s": 0.0, "decode_s": 0.0, "sample_s": 0.0, "regroup_s": 0.0,
                      "decode_steps": 0, "row_steps": 0, "prefill_tokens": 0}

    def run(self, req: Request) -> Request:
        with self._start:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="mirl-embedded-decode", daemon=True)
                self._thread.start()
                atexit.register(self.stop)
        self.queue.put(req)
        req.finished.wait()
        if req.error is not None:
            raise req.error
        return req

    def stop(self) -> None:
        """End the decode thread after the requests it holds (at exit: a daemon thread frozen
        inside torch while the interpreter tears down aborts the process)."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            self.queue.put(None)
            thread.join(timeout=30)

    def _loop(self) -> None:
        import torch

        active: list[Request] = []
        batch = PaddedKV(growing_cache)
        logits, stopping = None, False
        while True:
            if stopping and not active:
                while True:  # anything sent after the stop gets an answer, not a hang
                    try:
                        late = self.queue.get_nowait()
                    except queue.Empty:
                        return
                    if late is not None:
                        late.error = RuntimeError("the embedded model's decode thread was stopped")
                        late.finished.set()
            arrived = [] if active or stopping else [self.queue.get()]
            while True:
                try:
                    arrived.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            if None in arrived:  # stop: finish what is running and what came before the sentinel
                arrived, stopping = arrived[:arrived.index(None)], True
            try:
                with self.lm._lock, torch.inference_mode():
                    for req in arrived:
                        try:
                            logits = self._admit(req, active, batch, logits)
                        except Exception as e:  # noqa: BLE001 - this request's prompt failed, not the batch
                            req.error = e
                            req.finished.set()
                    if not active:
                        continue
                    t = time.perf_counter()
                    nxt = self._pick_all(active, logits)
                    self.stats["sample_s"] += time.perf_counter() - t
                    t = time.perf_counter()
                    leaving = [r for r in active if r.complete()]
                    if leaving:
                        keep, row = [], 0
                        for r in active:
                            if not r.complete():
                                keep += range(row, row + r.rows)
                            row += r.rows
                        for r in leaving:
                            self._finish(r)
                        active = [r for r in active if not r.complete()]
                        batch.keep(keep)
                        if not keep:
                            logits = None
                            self.stats["regroup_s"] += time.perf_counter() - t
                            continue
                        nxt, logits = nxt[keep], None
                    extra = batch.step_inputs(self.lm.device)
                    self.stats["regroup_s"] += time.perf_counter() - t
                    t = time.perf_counter()
                    logits, batch.cache = self.lm._step(nxt.view(-1, 1), batch.cache, **extra)
                    self.stats["decode_s"] += time.perf_counter() - t
                    self.stats["decode_steps"] += 1
                    self.stats["row_steps"] += len(batch.pad)
                    self.max_rows_seen = max(self.max_rows_seen, len(batch.pad))
            except BaseException as e:  # noqa: BLE001 - a failed forward fails every request in it
                for r in active + [r for r in arrived if not r.finished.is_set()]:
                    if not r.finished.is_set():
                        r.error = e
                        r.finished.set()
                active, logits = [], None
                batch.keep([])

    def _admit(self, req: Request, active: list[Request], batch: PaddedKV, logits):
        """Prefill `req` and put its rows at the bottom of the batch; returns the batch's logits."""
        import torch

        from mirl.llm.embedded import _kv_layers, row_seed

        req.gens = [torch.Generator(device=self.lm.device).manual_seed(row_seed(req.seed, i))
                    for i in req.indices]
        req.tokens, req.done, req.reason = [[] for _ in req.indices], [False] * req.rows, ["length"] * req.rows
        t = time.perf_counter()
        first, past = self.lm._prefill(req.ids)
        self.lm.last_prefill_seconds = time.perf_counter() - t
        self.stats["prefill_s"] += self.lm.last_prefill_seconds
        self.stats["prefill_tokens"] += self.lm.last_prefill_tokens
        kv = _kv_layers(past)
        if kv is None:
            raise RuntimeError("this model's KV cache cannot be batched (not a plain per-layer cache)")
        t = time.perf_counter()
        dtype = next(self.lm.model.parameters()).dtype  # a bf16 prefill's cache joins an f32 decode
        batch.add([(k.to(dtype).repeat(req.rows, 1, 1, 1), v.to(dtype).repeat(req.rows, 1, 1, 1)) for k, v in kv])
        self.stats["regroup_s"] += time.perf_counter() - t
        active.append(req)
        first = first.to(dtype).repeat(req.rows, 1)
        return first if logits is None else torch.cat([logits, first])

    def _pick_all(self, active: list[Request], logits):
        """Sample every row's next token with its own request's settings and generator."""
        import torch

        picks, row = [], 0
        for req in active:
            part = logits[row:row + req.rows]
            row += req.rows
            nxt = self.lm._pick(part.float(), req.temperature, req.top_p, req.gens)
            picks.append(nxt)
            for r in range(req.rows):
                if req.done[r]:
                    continue
                tok = int(nxt[r])
                req.tokens[r].append(tok)
                if tok in self.lm.end_ids:
                    req.done[r], req.reason[r] = True, "stop"
                elif req.stops and req.steps % 4 == 3 and _has_stop(self.lm._decode(req.tokens[r]), req.stops):
                    req.done[r], req.reason[r] = True, "stop"
            req.steps += 1
            if req.steps >= req.max_tokens:
                req.done = [True] * req.rows
        return torch.cat(picks)

    def _finish(self, req: Request) -> None:
        req.texts = [self.lm._decode(toks) for toks in req.tokens]
        req.finished.set()


def _has_stop(text: str, stops: list[str]) -> bool:
    return any(s and s in text for s in stops)
