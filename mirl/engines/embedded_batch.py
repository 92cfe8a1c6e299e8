"""Continuous batching for the embedded model: concurrent requests decode as one batch.

Why: on a CPU a 135M model's decode step is bound by reading the weights, not by arithmetic, so
8 rows cost about twice one row (measured: 60 ms for 1 row, 120 ms for 8, 2 cores, float32).
Profiling runs several episodes at once; each asks for one step at a time. Serialized, every
request paid a whole weight read per token; batched, they share it.

How: one thread owns the model. A request is prefilled on its own (through the model's prefix
cache), then its rows join the running batch: KV caches of different lengths are left-padded to
a common length, and padded positions are masked out with each row keeping its own positions.
A finished request is answered at once; its rows stay in the batch as filler until the next
regroup, which drops them in the same copy that adds the next arrivals (a regroup copies the
whole batch: at 16 rows of 1,000 positions that is ~0.7 GB). Sampling stays per row (each row
has its own generator, seeded by (seed, sample index)), so batching changes which other rows
share a forward pass, never which random numbers a row draws: the same request gives the same
text alone or batched, up to float rounding between batch shapes (tests check equality).

Every sampled token's log-probability is kept beside it (`log_softmax(logits / T)` in float32
before top-p truncation, T = 1 for greedy; see `mirl.engines.generator`), for the token path.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class Request:
    ids: Any  # the prompt, a [1, L] tensor
    indices: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    stops: list[str]
    stop_ids: set[int] | None = None  # None: the model's end ids
    gens: list[Any] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)  # per row, one per sampled token
    cached_tokens: int = 0  # prompt tokens taken from the prefix cache
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

    def __init__(self, new_cache: Callable[..., Any]):
        self.new_cache = new_cache
        self.cache = None
        self.pad: list[int] = []

    @property
    def length(self) -> int:
        return 0 if not self.pad else self.layers()[0][0].shape[2]

    def layers(self) -> list[tuple[Any, Any]]:
        return _kv_layers(self.cache)

    def add(self, kv: list[tuple[Any, Any]]) -> None:
        """Append rows (per layer [r, heads, L, dim]) at the bottom of the batch."""
        self.regroup(list(range(len(self.pad))), [kv])

    def keep(self, rows: list[int]) -> None:
        """Keep only these rows (in this order), dropping columns that are padding in all of them."""
        self.regroup(rows, [])

    def regroup(self, rows: list[int], joining: list[list[tuple[Any, Any]]]) -> None:
        """Keep `rows` (in order) and append the `joining` caches below them. Each element is
        copied once, into buffers with room to grow, so the next decode steps copy nothing."""
        if rows == list(range(len(self.pad))) and not joining:
            return
        pad = [self.pad[r] for r in rows]
        cut = min(pad) if pad else 0
        kept_len = self.length - cut if rows else 0
        width = max([kept_len] + [kv[0][0].shape[2] for kv in joining])
        self.pad = [p - cut + width - kept_len for p in pad] + [
            width - kv[0][0].shape[2] for kv in joining for _ in range(kv[0][0].shape[0])]
        if not self.pad:
            self.cache = None
            return
        runs = []  # (source row range, destination row) of consecutive kept rows
        for dest, r in enumerate(rows):
            if runs and runs[-1][1] == r and runs[-1][2] + (r - runs[-1][0]) == dest:
                runs[-1][1] = r + 1
            else:
                runs.append([r, r + 1, dest])
        old = self.layers() if rows else []
        ref = (old or joining[0])[0][0]
        total, room = len(self.pad), width + GROW_ROOM
        layers = []
        for i in range(len(old or joining[0])):
            bufs = []
            for j in (0, 1):
                buf = ref.new_empty(total, ref.shape[1], room, ref.shape[3])
                for r0, r1, dest in runs:
                    d1 = dest + r1 - r0
                    buf[dest:d1, :, :width - kept_len] = 0
                    buf[dest:d1, :, width - kept_len:width] = old[i][j][r0:r1, :, cut:]
                at = len(rows)
                for kv in joining:
                    t = kv[i][j]
                    n = width - t.shape[2]
                    buf[at:at + t.shape[0], :, :n] = 0
                    buf[at:at + t.shape[0], :, n:width] = t
                    at += t.shape[0]
                bufs.append(buf)
            layers.append(tuple(bufs))
        self.cache = self.new_cache([(k[:, :, :width], v[:, :, :width]) for k, v in layers], layers)

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


GROW_ROOM = 128  # positions of spare room a regrouped cache gets (decode then appends in place)


def growing_cache(kv: list[tuple[Any, Any]], buffers: list[tuple[Any, Any]] | None = None):
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
    for layer, (k, v), (kb, vb) in zip(cache.layers, kv, buffers or kv):
        layer.adopt(k, v, kb, vb)
    return cache


_GROWING: dict[type, type] = {}


def _growing_layer_class(base: type) -> type:
    if base in _GROWING:
        return _GROWING[base]

    class GrowingLayer(base):
        """keys/values are views of buffers with spare positions; `update` writes into them."""

        _kb = _vb = None

        def adopt(self, keys, values, kb, vb) -> None:
            """Hold `keys`/`values`, views of the first positions of buffers `kb`/`vb`."""
            self.lazy_initialization(keys, values)
            self._kb, self._vb = kb, vb
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
        self.crash = ""
        self.poll_s = 5.0  # how often a waiting caller checks that the decode thread is alive
        self.max_rows_seen = 0  # the largest batch decoded so far (for benchmarks and tests)
        self.live = 0  # requests with rows in the batch (read under the model's lock)
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
        while not req.finished.wait(timeout=self.poll_s):
            if not self._thread.is_alive():  # cannot happen by design; never hang on it
                raise RuntimeError(f"the embedded model's decode thread ended: {self.crash or 'stopped'}")
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
        with self._start:  # not the hook of a thread a new request started meanwhile
            if thread is not None and self._thread is thread and not thread.is_alive():
                atexit.unregister(self.stop)  # it held the batcher, and its model, until the process ended

    def _loop(self) -> None:
        try:
            self._serve()
        except BaseException as e:  # noqa: BLE001 - recorded; waiting callers see it and raise
            self.crash = repr(e)
            log.exception("the embedded model's decode thread ended")

    def _serve(self) -> None:
        import torch

        # the batch's rows, top to bottom: (request, its sample row), or None for a row whose
        # request is done; done rows stay (decoding filler) until the next regroup, which drops
        # them in the same copy that adds the next arrivals
        rows: list[tuple[Request, int] | None] = []
        batch = PaddedKV(growing_cache)
        logits, stopping = None, False
        while True:
            live = any(m is not None for m in rows)
            if stopping and not live:
                self._refuse_late()
                return
            arrived = [] if live or stopping else [self.queue.get()]
            while True:
                try:
                    arrived.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            if None in arrived:  # stop: finish what is running and what came before the sentinel
                arrived, stopping = arrived[:arrived.index(None)], True
            try:
                with self.lm._lock, torch.inference_mode():
                    joining = []
                    for req in arrived:
                        try:
                            joining.append((req, *self._prefill(req)))
                        except Exception as e:  # noqa: BLE001 - this request's prompt failed, not the batch
                            req.error = e
                            req.finished.set()
                    dead = sum(m is None for m in rows)
                    if joining or dead * 2 > len(rows):
                        t = time.perf_counter()
                        keep = [i for i, m in enumerate(rows) if m is not None]
                        batch.regroup(keep, [kv for _, _, kv in joining])
                        parts = ([logits[keep]] if keep else []) + [first for _, first, _ in joining]
                        logits = torch.cat(parts) if parts else None
                        rows = [rows[i] for i in keep] + [(req, r) for req, _, _ in joining for r in range(req.rows)]
                        self.stats["regroup_s"] += time.perf_counter() - t
                    self.live = len({id(m[0]) for m in rows if m is not None})
                    if not rows:
                        continue
                    t = time.perf_counter()
                    nxt = self._pick_all(rows, logits)
                    self.stats["sample_s"] += time.perf_counter() - t
                    for i, m in enumerate(rows):
                        if m is not None and m[0].complete():
                            if m[1] == 0:
                                self._finish(m[0])
                            rows[i] = None
                    self.live = len({id(m[0]) for m in rows if m is not None})
                    if all(m is None for m in rows):
                        batch.keep([])
                        rows, logits = [], None
                        continue
                    extra = batch.step_inputs(self.lm.device)
                    t = time.perf_counter()
                    logits, batch.cache = self.lm._step(nxt.view(-1, 1), batch.cache, **extra)
                    self.stats["decode_s"] += time.perf_counter() - t
                    self.stats["decode_steps"] += 1
                    self.stats["row_steps"] += sum(m is not None for m in rows)
                    self.max_rows_seen = max(self.max_rows_seen, len(rows))
            except BaseException as e:  # noqa: BLE001 - a failed forward fails every request in it
                for req in [m[0] for m in rows if m is not None] + arrived:
                    if not req.finished.is_set():
                        req.error = e
                        req.finished.set()
                rows, logits = [], None
                batch.keep([])
                self.live = 0

    def _refuse_late(self) -> None:
        while True:  # anything sent after the stop gets an answer, not a hang
            try:
                late = self.queue.get_nowait()
            except queue.Empty:
                return
            if late is not None:
                late.error = RuntimeError("the embedded model's decode thread was stopped")
                late.finished.set()

    def _prefill(self, req: Request):
        """Prefill `req`'s prompt: (logits for its rows, its KV cache with one copy per row)."""
        import torch

        from mirl.engines.generator import row_seed

        req.gens = [torch.Generator(device=self.lm.device).manual_seed(row_seed(req.seed, i))
                    for i in req.indices]
        req.tokens, req.done, req.reason = [[] for _ in req.indices], [False] * req.rows, ["length"] * req.rows
        req.logprobs = [[] for _ in req.indices]
        t = time.perf_counter()
        first, past = self.lm._prefill(req.ids)
        self.lm.last_prefill_seconds = time.perf_counter() - t
        req.cached_tokens = self.lm.last_cached_tokens
        self.stats["prefill_s"] += self.lm.last_prefill_seconds
        self.stats["prefill_tokens"] += self.lm.last_prefill_tokens
        kv = _kv_layers(past)
        if kv is None:
            raise RuntimeError("this model's KV cache cannot be batched (not a plain per-layer cache)")
        dtype = next(self.lm.model.parameters()).dtype  # a bf16 prefill's cache joins an f32 decode
        kv = [(k.to(dtype).repeat(req.rows, 1, 1, 1), v.to(dtype).repeat(req.rows, 1, 1, 1)) for k, v in kv]
        return first.to(dtype).repeat(req.rows, 1), kv

    def _pick_all(self, rows: list[tuple[Request, int] | None], logits):
        """Sample every live row's next token with its request's settings and generator (done
        rows get a filler token)."""
        import torch

        nxt = torch.zeros(len(rows), dtype=torch.long, device=logits.device)
        i = 0
        while i < len(rows):
            if rows[i] is None:
                i += 1
                continue
            req = rows[i][0]
            part = logits[i:i + req.rows].float()
            picked = self.lm._pick(part, req.temperature, req.top_p, req.gens)
            nxt[i:i + req.rows] = picked
            lps = _sampled_logprobs(part, picked, req.temperature).tolist()
            toks = picked.tolist()
            for r in range(req.rows):
                if req.done[r]:
                    continue
                tok = toks[r]
                req.tokens[r].append(tok)
                req.logprobs[r].append(lps[r])
                if tok in (self.lm.end_ids if req.stop_ids is None else req.stop_ids):
                    req.done[r], req.reason[r] = True, "stop"
                elif req.stops and req.steps % 4 == 3 and _has_stop(self.lm._decode(req.tokens[r]), req.stops):
                    req.done[r], req.reason[r] = True, "stop"
            req.steps += 1
            if req.steps >= req.max_tokens:
                req.done = [True] * req.rows
            i += req.rows
        return nxt

    def _finish(self, req: Request) -> None:
        req.texts = [self.lm._decode(toks) for toks in req.tokens]
        req.finished.set()


def _sampled_logprobs(logits, picked, temperature: float):
    """log_softmax(logits / T) at the picked tokens (float32 logits; T = 1 when greedy), before
    any top-p truncation: the number a teacher-forced pass recomputes."""
    import torch

    scaled = logits / temperature if temperature > 0 else logits
    return scaled.gather(-1, picked.view(-1, 1)).squeeze(-1) - torch.logsumexp(scaled, dim=-1)


def _has_stop(text: str, stops: list[str]) -> bool:
    return any(s and s in text for s in stops)


def _kv_layers(cache) -> list[tuple[Any, Any]] | None:
    """The per-layer (keys, values) tensors, [batch, heads, positions, dim], of a plain KV cache;
    None for other kinds (sliding windows, offloaded, ...), which are then not prefix-cached."""
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers >= 4.56: a list of cache layers
        if any(type(layer).__name__ not in ("DynamicLayer", "GrowingLayer") or not getattr(layer, "is_initialized", True)
               for layer in layers):
            return None
        return [(layer.keys, layer.values) for layer in layers]
    if type(cache).__name__ == "DynamicCache" and hasattr(cache, "key_cache"):  # older transformers
        return list(zip(cache.key_cache, cache.value_cache))
    if isinstance(cache, (tuple, list)) and all(len(kv) == 2 for kv in cache):  # the legacy tuple format
        return [(kv[0], kv[1]) for kv in cache]
    return None
