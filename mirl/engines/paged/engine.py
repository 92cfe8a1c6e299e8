"""The continuous-batching engine: every in-flight request of every thread decodes in one batch.

Why: agents ask for one turn at a time, each with its own prompt, from many threads. An engine that
serves one call at a time makes 32 concurrent episodes share the GPU in turns (measured on an H200:
217-300 tokens/s against ~10,000 for one call of 32 rows), while a decode step costs nearly the same
for 1 row as for 64 (it reads the same weights).

How: one owner thread runs the model. A request (a prompt, n samples, its own sampling settings,
stop ids and max_tokens) joins at the next step: its prompt's whole pages already in the prefix
cache are taken as they are (`pages.PagePool`), the rest is prefilled in chunks of at most
`prefill_tokens` tokens per step, packed with other arrivals' chunks into one forward pass, between
decode steps, so the rows that are decoding are never held up by more than one chunk. When its
prompt is in, its n rows start sampling from the prompt's last logits; they share the prompt's
pages (only the last, partial one is copied for each row). On a GPU a pass and its first tokens run on a
second stream beside the decode steps, and the rows join the batch at the first step after their tokens are
back (`prefill_ahead`: passes launched and not read yet). Every live row advances in the same decode
step; a row leaves when it samples a stop id or reaches max_tokens, and its request is answered when
its last row leaves. On a GPU the decode step (embedding, layers, head, sampling) is captured as a
CUDA graph per batch-size bucket and replayed; the pointwise work is fused by `torch.compile`.

Sampling keeps the generator contract (`mirl.engines.generator`, `sampler`): a row's draws depend only
on (seed, sample index), so a request gives the same ids alone or inside a busy batch (up to float
rounding between batch shapes). `update_weights` is applied by the owner thread between two steps:
from the next step every row samples from the new weights, and every cached prefix (computed with the
old ones) is forgotten.

On a CPU the same engine runs eagerly (no graphs, no compile, the torch attention backend): that is
what the test suite checks the contract on.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mirl.engines import GPU_SHARE_ENV
from mirl.engines.generator import (
    Generation,
    Sample,
    TokenGeneration,
    TokenSample,
    check_context,
    check_prompt,
    row_seed,
)
from mirl.engines.paged import sampler
from mirl.engines.paged.attention import Attention
from mirl.engines.paged.batch import RING, DeviceBatch, Flight, Layout
from mirl.engines.paged.model import PagedModel
from mirl.engines.paged.pages import OutOfPages, PagePool
from mirl.engines.weights import end_ids, load_model, load_state, model_name

log = logging.getLogger(__name__)
_SIZING_LOCK = threading.Lock()  # KV pools sized from free memory, one engine at a time
# The owner thread takes the GIL back after every torch call; while other threads run Python it waits up to
# the interpreter's switch interval each time (5 ms by default). Measured on an H100 (benchmarks/gpu/NOTES.md,
# v7): 64 episodes beside 8 busy Python threads got 2,191 tokens/s at 0.5 ms and did not finish in ~2 minutes
# at 5 ms; without them 17,276 at 5 ms and 17,772 at 0.5 ms. So a process that starts an engine runs at 0.5 ms
# at most (set when the owner thread starts, never raised, not restored).
SWITCH_INTERVAL = 0.0005



@dataclass(eq=False)
class Request:
    prompt: list[int]
    indices: list[int]
    max_tokens: int
    inv_temperature: float  # 0: greedy
    top_p: float
    seed: int
    stop_ids: frozenset[int]
    stops: list[str] = field(default_factory=list)  # text stop strings (text calls)
    # set by the owner thread
    pages: list[int] = field(default_factory=list)  # the prompt's pages, held while it prefills
    computed: int = 0  # prompt positions whose KV is in its pages
    cached: int = 0  # of those, how many came from the prefix cache
    parent: int = 0  # key id of its last registered prompt page
    reserve: int = 0  # pages still promised to it
    rows: list[Row] = field(default_factory=list)
    live: int = 0  # rows still decoding
    weights: tuple[int, int] = (0, 0)  # weights version when it joined and when it finished
    t_submit: float = 0.0
    t_first: float = 0.0  # when its prompt was in and its rows started
    t_done: float = 0.0
    error: BaseException | None = None
    finished: threading.Event = field(default_factory=threading.Event)


@dataclass(eq=False)
class Row:
    req: Request
    seed: int
    tokens: list[int]  # prompt + sampled ids (keys of the pages it fills)
    pages: list[int]
    n: int  # positions whose KV the launched steps write (the host runs one step ahead of what it has read)
    written: int  # positions whose KV is written by steps whose tokens have come back
    parent: int  # key id of its last registered page
    registered: int  # pages of it registered (or shared prompt pages)
    planned: int = 1  # tokens it will have once the launched steps are read (the first is sampled at its start)
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    done: bool = False
    reason: str = "length"


def gpu_share() -> float:
    """This process's share of its GPU (`MIRL_GPU_SHARE`, 0 < share <= 1; 1 when unset): processes that
    start together on one GPU each see it nearly all free, and would each size a pool from that."""
    raw = os.environ.get(GPU_SHARE_ENV, "").strip()
    if not raw:
        return 1.0
    try:
        share = float(raw)
    except ValueError:
        share = -1.0
    if not 0 < share <= 1:
        raise ValueError(f"{GPU_SHARE_ENV}={raw!r}: give a share of the GPU in (0, 1]")
    return share


class PagedEngine:
    """A causal LM of a supported family (`model.supports`) served by continuous batching.

    `source`: a checkpoint directory or a .gguf. `kv_memory`: the share of free GPU memory, at the
    first request, that the KV pages take (times the process's `gpu_share()`; or `kv_tokens` exactly); `max_rows`: rows decoding at
    once; `prefill_tokens`: prompt tokens per step; `graphs`, `compiled`: CUDA graphs and
    torch.compile (default: on a GPU); `attention`: "triton" (default on a GPU) or "torch"."""

    gpu_timing = False  # set before the first request (benchmarks): GPU seconds of steps and passes in `stats`
    # prefill passes launched and not read back while rows decode: 0 waits for each pass's first tokens (the
    # passes then stall the decoding rows for their whole length); 2 keeps one queued behind the running one
    # on the side stream. Measured on an H100 (benchmarks/gpu/NOTES.md, v12), SmolLM2 agents workload against
    # one group call: 0.76 / 0.53 / 0.37 at N = 16 / 64 / 256 with 0, 0.80 / 0.60 / 0.44 with 2 (1: between).
    # Benchmarks set it on an engine to compare (`engine_bench.py --ahead`).
    prefill_ahead = 2

    def __init__(self, source: str | Path, device: str | None = None, dtype: str | None = None, *,
                 max_rows: int = 256, page_size: int = 16, kv_memory: float = 0.3, kv_tokens: int | None = None,
                 prefill_tokens: int | None = None, max_model_len: int | None = None, graphs: bool | None = None,
                 compiled: bool | None = None, attention: str | None = None, prefix_cache: bool = True):
        t0 = time.perf_counter()
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        on_gpu = self.device.type == "cuda"
        self.model, self.tokenizer = load_model(source, str(self.device), dtype)
        self.name = model_name(source)
        self.end_ids = end_ids(self.tokenizer)
        cfg = self.model.config
        self.context_length = int(max_model_len or getattr(cfg, "max_position_embeddings", 4096) or 4096)
        self.page_size = int(page_size)
        self.max_rows = int(max_rows)
        self.graphs = on_gpu if graphs is None else bool(graphs)
        self.compiled = on_gpu if compiled is None else bool(compiled)
        if self.graphs and not on_gpu:
            raise ValueError("CUDA graphs need a GPU")
        backend = attention or ("triton" if on_gpu else "torch")
        if self.graphs and backend != "triton":
            raise ValueError("CUDA graphs need the triton attention backend (the torch one reads lengths on the host)")
        if self.compiled:
            from torch import _dynamo

            _dynamo.config.cache_size_limit = max(_dynamo.config.cache_size_limit, 64)
        self.pm = PagedModel(self.model, self.context_length, compiled=self.compiled)
        self.attn = Attention(backend, self.page_size, self.pm.scale)
        self.prefill_tokens = int(prefill_tokens or (4096 if on_gpu else 256))
        self.kv_memory, self.kv_tokens = float(kv_memory), kv_tokens
        self.prefix_cache = prefix_cache
        self.token_hash = sampler.token_hashes(self.pm.vocab, self.device)
        self._sample = torch.compile(sampler.sample, dynamic=True) if self.compiled else sampler.sample
        self.width = -(-self.context_length // self.page_size)  # page-table columns
        self.kv: torch.Tensor | None = None  # [layers, slots, 2, kv heads, dim], allocated at the first request
        self.pool: PagePool | None = None
        self.batch: DeviceBatch | None = None
        self.max_seqs = 64  # sequences per prefill pass
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.crash = ""
        self.weights_version = 0
        self.load_seconds = time.perf_counter() - t0
        self.stats = {"decode_s": 0.0, "prefill_s": 0.0, "host_s": 0.0, "weights_s": 0.0, "steps": 0,
                      "row_steps": 0, "prefill_tokens": 0, "cached_tokens": 0, "prefill_passes": 0,
                      "graphs_captured": 0, "failed_captures": 0, "max_rows_seen": 0, "max_pages_used": 0, "requests": 0,
                      "steps_beside_passes": 0,  # decode steps launched while a prefill pass was not read back
                      # where a prefill pass's time goes: building its inputs, launching it and its first
                      # tokens; then (not in prefill_s) reading those back (waiting, if the GPU is not done)
                      # and starting the rows
                      "prefill_build_s": 0.0, "prefill_launch_s": 0.0, "first_tokens_s": 0.0, "first_read_s": 0.0,
                      "gpu_decode_s": 0.0, "gpu_prefill_s": 0.0}
        if on_gpu:  # the weights and tables were made on this thread's stream; the owner thread uses others
            torch.cuda.current_stream(self.device).synchronize()

    # --- public ----------------------------------------------------------------------------------

    def generate_tokens(self, prompt_ids: Sequence[int], sample_indices: Sequence[int], max_tokens: int = 256,
                        temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
                        stop_ids: Sequence[int] | None = None) -> TokenGeneration:
        """The `Generator` interface (see the module docstring)."""
        t0 = time.perf_counter()
        ids = check_prompt(prompt_ids, self.pm.vocab)
        check_context(len(ids), max_tokens, self.context_length, self.name)
        if max_tokens <= 0 or not sample_indices:
            return TokenGeneration([TokenSample([], [], "length") for _ in sample_indices], len(ids))
        req = self._submit(ids, sample_indices, max_tokens, temperature, top_p, seed, stop_ids, [])
        samples = [TokenSample(ids=r.ids, logprobs=r.logprobs, finish_reason=r.reason) for r in req.rows]
        return TokenGeneration(samples=samples, prompt_tokens=len(ids), cached_tokens=req.cached,
                               seconds=time.perf_counter() - t0,
                               meta={"decoder": "paged", "queued_s": round(req.t_first - req.t_submit, 4),
                                     "weights_version": list(req.weights)})

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        msgs = [{"role": str(m.get("role", "user")), "content": _text(m.get("content"))} for m in messages]
        enc = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True)
        ids = enc["input_ids"]
        return [int(t) for t in (ids[0] if ids and isinstance(ids[0], list) else ids)]

    def generate(self, messages: list[dict[str, Any]], sample_indices: list[int], max_tokens: int = 256,
                 temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
                 stop: str | list[str] | None = None) -> Generation:
        """A text call (the litellm provider's): the chat template, then the token path; a sample also
        ends at the first of `stop` (cut there)."""
        t0 = time.perf_counter()
        stops = [s for s in ([stop] if isinstance(stop, str) else list(stop or [])) if s]
        ids = self.prompt_ids(messages)
        check_context(len(ids), max_tokens, self.context_length, self.name)
        if max_tokens <= 0 or not sample_indices:
            return Generation([Sample("", 0, "length") for _ in sample_indices], len(ids), time.perf_counter() - t0)
        req = self._submit(ids, sample_indices, max_tokens, temperature, top_p, seed, None, stops)
        samples = []
        for r in req.rows:
            text, reason = self._decode_text(r.ids), r.reason
            cuts = [text.index(s) for s in stops if s in text]
            if cuts:
                text, reason = text[:min(cuts)], "stop"
            samples.append(Sample(text=text, output_tokens=len(r.ids), finish_reason=reason))
        return Generation(samples=samples, prompt_tokens=len(ids), seconds=time.perf_counter() - t0,
                          cached_tokens=req.cached)

    def update_weights(self, weights: Any) -> None:
        """New weights (a state dict, a checkpoint directory or .safetensors file), applied between two
        steps; every cached prefix is dropped. Keys not given keep their values; unknown keys are an
        error. Returns once they are in."""
        state = load_state(weights)
        unknown = set(state) - set(self.model.state_dict())
        if unknown:
            raise KeyError(f"weights not in {self.name}: {sorted(unknown)[:5]}")
        if self._thread is None or not self._thread.is_alive():
            with self._start_lock:
                if self._thread is None or not self._thread.is_alive():
                    self._apply_weights(state)
                    return
        done = threading.Event()
        box: list[BaseException] = []
        ready = None
        if self.device.type == "cuda":  # the state may still be being written on this thread's stream
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(self.device))
        self._queue.put(("weights", state, done, box, ready))
        self._wait(done)
        if box:
            raise box[0]

    def close(self) -> None:
        """End the owner thread after the requests it holds; the engine's GPU memory goes with its last
        reference (the exit hook that closes an engine left open no longer holds it)."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join(timeout=60)
        with self._start_lock:  # not the hook of a thread a new request started meanwhile
            if thread is not None and self._thread is thread and not thread.is_alive():
                atexit.unregister(self.close)

    @property
    def kv_capacity(self) -> dict[str, int]:
        """Pages, tokens and how many 4,096-token sequences the KV pool holds (0 before the first request)."""
        pages = self.pool.num_pages - 1 if self.pool else 0
        tokens = pages * self.page_size
        return {"pages": pages, "tokens": tokens, "sequences_4k": tokens // 4096,
                "bytes": 0 if self.kv is None else self.kv.numel() * self.kv.element_size()}

    # --- submitting --------------------------------------------------------------------------------

    def _submit(self, ids, sample_indices, max_tokens, temperature, top_p, seed, stop_ids, stops) -> Request:
        stop = frozenset(self.end_ids if stop_ids is None else (int(t) for t in stop_ids))
        req = Request(prompt=ids, indices=[int(i) for i in sample_indices], max_tokens=int(max_tokens),
                      inv_temperature=0.0 if temperature <= 0 else 1.0 / float(temperature),
                      top_p=float(top_p) if 0 < top_p < 1 and temperature > 0 else 1.0, seed=int(seed),
                      stop_ids=stop, stops=stops, t_submit=time.perf_counter())
        if len(req.indices) > self.max_rows:
            raise ValueError(f"{len(req.indices)} samples in one request; the engine decodes at most {self.max_rows} rows")
        self._ensure_thread()
        self._queue.put(req)
        self._wait(req.finished)
        if req.error is not None:
            raise req.error
        return req

    def _ensure_thread(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                if sys.getswitchinterval() > SWITCH_INTERVAL:
                    log.info("paged engine: thread switch interval %.4f s -> %.4f s", sys.getswitchinterval(),
                             SWITCH_INTERVAL)
                    sys.setswitchinterval(SWITCH_INTERVAL)
                self._thread = threading.Thread(target=self._loop, name="mirl-paged-engine", daemon=True)
                self._thread.start()
                atexit.register(self.close)

    def _wait(self, event: threading.Event) -> None:
        while not event.wait(timeout=5.0):
            if self._thread is None or not self._thread.is_alive():
                raise RuntimeError(f"the engine's owner thread ended: {self.crash or 'stopped'}")

    # --- the owner thread --------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            with torch.inference_mode():
                self._serve()
        except BaseException as e:  # noqa: BLE001 - recorded; waiting callers see the thread gone
            self.crash = repr(e)
            log.exception("the paged engine's owner thread ended")

    def _serve(self) -> None:
        waiting: list[Request] = []
        prefilling: list[Request] = []
        self.active: list[Row] = []  # rows decoding, in the order of the next layout
        self._laid: list[Row] = []  # rows in the device buffers, slot by slot
        self._inflight: list[Flight] = []  # launched decode steps not read back yet (at most two)
        self._passes: list[tuple[list[Request], list, Flight]] = []  # launched passes not read back yet
        self._deferred: list[tuple[int, list[int]]] = []  # pages to free once that many steps are read
        self._launched = self._read = 0
        if self.batch is not None and self.batch.stream is not None:  # a new owner thread (see `_allocate`)
            torch.cuda.set_stream(self.batch.stream)
        stopping = False
        while True:
            idle = not (waiting or prefilling or self.active or self._inflight or self._passes)
            if stopping and idle:
                self._refuse_late()
                return
            msgs = [] if not idle or stopping else [self._queue.get()]
            while True:
                try:
                    msgs.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                while msgs:
                    m = msgs.pop(0)
                    if m is None:
                        stopping = True
                    elif isinstance(m, tuple):
                        _, state, done, box, ready = m
                        try:
                            self._start_ready(wait=len(self._passes))
                            self._drain()  # new weights from the next step on: nothing in flight
                        except BaseException as e:  # a failed step: its caller hears of it too
                            box.append(e)
                            done.set()
                            raise
                        try:
                            self._apply_weights(state, ready)
                        except Exception as e:  # noqa: BLE001 - the caller raises it
                            box.append(e)
                        done.set()
                    else:
                        waiting.append(m)
                if not (waiting or prefilling or self.active or self._inflight or self._passes):
                    continue
                self._allocate()
                self._admit(waiting, prefilling)
                self._start_ready()  # rows whose first tokens are back join the next step
                launched = bool(prefilling) and len(self._passes) < min(max(1, self.prefill_ahead), RING - 1)
                if launched:
                    self._prefill_pass(prefilling)
                if self._passes and (launched or not self.active):
                    # with nothing else to do (or no passes beside steps) wait for one; else a CPU's is done
                    self._start_ready(wait=int(not self.active or self.prefill_ahead <= 0))
                if self.active:
                    self._launch()
                while len(self._inflight) > (1 if self.active else 0):
                    self._collect()
            except BaseException as e:  # noqa: BLE001 - a failed pass fails every request in it
                log.exception("the paged engine failed a step")
                reqs = {id(r.req): r.req for r in self.active + self._laid}
                started = [req for reqs_, _, _ in self._passes for req in reqs_]
                for m in msgs:  # messages not reached: answered, never left waiting
                    if m is None:
                        stopping = True
                    elif isinstance(m, tuple):
                        m[3].append(e)
                        m[2].set()
                    else:
                        waiting.append(m)
                msgs = []
                for req in list(reqs.values()) + started + prefilling + waiting:
                    self._fail(req, e)
                waiting, prefilling = [], []
                self._reset()

    def _reset(self) -> None:
        """After a failed pass: every request failed, every page free again, nothing in flight."""
        try:
            if self.batch is not None:  # neither stream still runs what is dropped here
                self.batch.synchronize()
        finally:
            self.active, self._laid, self._inflight, self._deferred, self._passes = [], [], [], [], []
            self._launched = self._read = 0
            if self.pool is not None:
                self.pool = PagePool(self.pool.num_pages, self.page_size)
            if self.batch is not None:
                self.batch.bucket = 0

    def _refuse_late(self) -> None:
        while True:
            try:
                m = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(m, Request):
                m.error = RuntimeError("the paged engine was closed")
                m.finished.set()
            elif isinstance(m, tuple):
                m[3].append(RuntimeError("the paged engine was closed"))
                m[2].set()

    def _fail(self, req: Request, e: BaseException) -> None:
        if req.finished.is_set():
            return
        req.error = e
        req.finished.set()

    def _apply_weights(self, state: dict[str, Any], ready: Any = None) -> None:
        """Load `state` (once `ready`, the caller's event, has passed); in place when this returns. Stream
        waits, never a device-wide one: another engine's thread may be capturing a graph."""
        t = time.perf_counter()
        if ready is not None:
            ready.synchronize()
        with torch.no_grad():
            self.model.load_state_dict(state, strict=False)
        if self.pool is not None:
            self.pool.clear()
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        self.weights_version += 1
        self.stats["weights_s"] += time.perf_counter() - t

    def _allocate(self) -> None:
        """The KV pool and the device buffers, sized at the first request (after whatever else in the
        process, e.g. a learner, has taken its memory)."""
        if self.batch is not None:
            return
        per_token = self.pm.kv_bytes_per_token()
        # engines of one process that start at once (several policies evaluated side by side) size
        # their pools one after another, each from what the ones before left free
        with _SIZING_LOCK:
            if self.kv_tokens:
                tokens = int(self.kv_tokens)
            elif self.device.type == "cuda":
                free, _ = torch.cuda.mem_get_info(self.device)
                tokens = int(free * self.kv_memory * gpu_share()) // per_token
            else:
                tokens = (512 << 20) // per_token
            tokens = min(tokens, 2 * self.max_rows * self.context_length)  # more would never be used
            pages = max(2, tokens // self.page_size)
            kv = torch.zeros(self.pm.num_layers, pages * self.page_size, 2, self.pm.kv_heads, self.pm.dim,
                             dtype=self.pm.dtype, device=self.device)
        batch = DeviceBatch(self.pm, self.attn, kv, max_rows=self.max_rows, width=self.width,
                            page=self.page_size, prefill_tokens=self.prefill_tokens, max_seqs=self.max_seqs,
                            graphs=self.graphs, sample=self._sample, token_hash=self.token_hash,
                            compiled=self.compiled, gpu_timing=self.gpu_timing)
        # all three or none: a batch that failed to build (out of memory) is tried again at the next request
        self.kv, self.pool, self.batch = kv, PagePool(pages, self.page_size), batch
        if self.batch.stream is not None:  # the owner thread's decode steps go on the batch's decode stream
            torch.cuda.set_stream(self.batch.stream)
        log.info("paged engine %s: %d KV pages of %d tokens (%.1f GB, %d sequences of 4k)", self.name, pages,
                 self.page_size, self.kv.numel() * self.kv.element_size() / 1e9, pages * self.page_size // 4096)

    # --- admission and prefill ---------------------------------------------------------------------

    def _pages_needed(self, req: Request, cached_pages: int) -> int:
        p, n = self.page_size, len(req.prompt)
        prompt = -(-n // p) - cached_pages
        per_row = -(-(n + req.max_tokens - 1) // p) - n // p
        return prompt + len(req.indices) * per_row

    def _admit(self, waiting: list[Request], prefilling: list[Request]) -> None:
        rows = len(self.active) + sum(len(r.indices) for r in prefilling) + \
            sum(len(r.indices) for reqs, _, _ in self._passes for r in reqs)  # (their first tokens not back)
        while waiting:
            req = waiting[0]
            if rows + len(req.indices) > self.max_rows:
                return
            pages, parent = self.pool.match(req.prompt, len(req.prompt) - 1) if self.prefix_cache else ([], 0)
            need = self._pages_needed(req, len(pages))
            if need + len(pages) > self.pool.num_pages - 1:  # it would never fit
                self.pool.release(pages)
                waiting.pop(0)
                self._fail(req, OutOfPages(
                    f"a request of {len(req.prompt)} prompt tokens, {len(req.indices)} samples of up to "
                    f"{req.max_tokens} tokens needs {need + len(pages)} KV pages; the pool has "
                    f"{self.pool.num_pages - 1} of {self.page_size} tokens (raise kv_memory or kv_tokens)"))
                continue
            if need > self.pool.available:
                self.pool.release(pages)
                return
            waiting.pop(0)
            self.pool.reserve(need)
            req.reserve, req.pages, req.parent = need, pages, parent
            req.computed = req.cached = len(pages) * self.page_size
            req.weights = (self.weights_version, self.weights_version)
            self.stats["cached_tokens"] += req.cached
            self.stats["requests"] += 1
            prefilling.append(req)
            rows += len(req.indices)

    def _take(self, req: Request) -> int:
        req.reserve -= 1
        return self.pool.take(reserved=True)

    def _prefill_pass(self, prefilling: list[Request]) -> None:
        """One forward pass over the next prompt tokens of the prefilling requests, packed."""
        t0 = time.perf_counter()
        p, budget = self.page_size, self.batch.prefill_cap
        ids, positions, slots, seqs, reqs = [], [], [], [], []
        for req in prefilling:
            if budget <= 0 or len(seqs) == self.max_seqs:
                break
            start = req.computed
            end = min(len(req.prompt), start + budget)
            while len(req.pages) * p < end:
                req.pages.append(self._take(req))
            seqs.append((len(ids), end - start, end, req.pages))
            ids.extend(req.prompt[start:end])
            positions.extend(range(start, end))
            slots.extend(req.pages[i // p] * p + i % p for i in range(start, end))
            reqs.append(req)
            budget -= end - start
        done = [(req, q0 + qn - 1) for req, (q0, qn, end, _) in zip(reqs, seqs) if end == len(req.prompt)]
        t1 = time.perf_counter()
        with self.batch.side():
            self.batch.prefill(ids, positions, slots, seqs, [last for _, last in done])
            t2 = time.perf_counter()
            for req, (_, _, end, _) in zip(reqs, seqs):
                self._register_prompt(req, end)
                req.computed = end
            # a failure here leaves the requests in `prefilling`, which fails them with the pass
            starts, flight = self._launch_rows([req for req, _ in done]) if done else ([], self.batch.pass_done())
        self.stats["prefill_build_s"] += t1 - t0
        self.stats["prefill_launch_s"] += t2 - t1
        self.stats["first_tokens_s"] += time.perf_counter() - t2
        self._passes.append(([req for req, _ in done], starts, flight))
        for req, _ in done:
            prefilling.remove(req)
        self.stats["prefill_tokens"] += len(ids)
        self.stats["prefill_passes"] += 1
        self.stats["prefill_s"] += time.perf_counter() - t0

    def _start_ready(self, wait: int = 0) -> None:
        """Start the rows of every launched pass whose first tokens are back, in launch order; the oldest
        `wait` passes are waited for."""
        while self._passes:
            reqs, starts, flight = self._passes[0]
            if wait <= 0 and not flight.ready():
                return
            wait -= 1
            t0 = time.perf_counter()
            toks, lps = self.batch.read(flight)
            if reqs:
                self._start_rows(reqs, starts, toks, lps)
            self.stats["first_read_s"] += time.perf_counter() - t0
            self._passes.pop(0)  # (after: a failure in `_start_rows` fails the requests with the pass)

    def _register_prompt(self, req: Request, end: int) -> None:
        if not self.prefix_cache:
            return
        p = self.page_size
        for j in range(req.computed // p, end // p):
            req.parent = self.pool.register(req.pages[j], req.parent, req.prompt[j * p:(j + 1) * p])

    def _launch_rows(self, reqs: list[Request]) -> tuple[list, Flight]:
        """The first tokens of the rows of the requests whose prompts are in, from their prompts' last logits
        (row j of the pass's for reqs[j]), launched: each row's first token sampled, the prompt's whole pages
        shared, its partial last page copied; one launch for all of them. Returns what `_start_rows` needs."""
        p = self.page_size
        which, seeds, inv_t, top_p, copy_from, copy_to, starts = [], [], [], [], [], [], []
        for j, req in enumerate(reqs):
            n = len(req.prompt)
            full, part = n // p, n % p
            for i in req.indices:
                pages = list(req.pages[:full])
                for page in pages:
                    self.pool.hold(page)
                if part:
                    own = self._take(req)
                    copy_from.extend(range(req.pages[full] * p, req.pages[full] * p + part))
                    copy_to.extend(range(own * p, own * p + part))
                    pages.append(own)
                seed = row_seed(req.seed, i)
                which.append(j)
                seeds.append(seed)
                inv_t.append(req.inv_temperature)
                top_p.append(req.top_p)
                starts.append((req, seed, pages))
        return starts, self.batch.first_tokens(which, seeds, inv_t, top_p, copy_from, copy_to)

    def _start_rows(self, reqs: list[Request], starts: list, toks: list[int], lps: list[float]) -> None:
        """The rows of a pass's completed requests, from their first tokens (read back): they join the next
        decode step, and the prompts' pages go back (each row holds what it shares)."""
        p = self.page_size
        self._gpu_stats()
        for (req, seed, pages), t, logprob in zip(starts, toks, lps):
            n = len(req.prompt)
            row = Row(req=req, seed=seed, tokens=list(req.prompt), pages=pages, n=n, written=n, parent=req.parent,
                      registered=n // p)
            req.rows.append(row)
            self._accept(row, t, logprob)
            if row.done:  # ended at its first token: it never decodes, so nothing else gives its pages back
                self.pool.release(row.pages)  # (its partial page's copy has run: the first tokens were read)
        now = time.perf_counter()
        for req in reqs:
            self.pool.release(req.pages)
            req.pages = []
            req.t_first = now
            req.live = sum(not r.done for r in req.rows)
            self.active.extend(r for r in req.rows if not r.done)
            if req.live == 0:
                self._finish(req)

    def _accept(self, row: Row, tok: int, lp: float) -> None:
        """A sampled token: kept, and the row ended when it is a stop id, a stop string or the last."""
        row.ids.append(tok)
        row.logprobs.append(lp)
        row.tokens.append(tok)
        req = row.req
        if tok in req.stop_ids:
            row.done, row.reason = True, "stop"
        elif len(row.ids) >= req.max_tokens:
            row.done = True
        elif req.stops and len(row.ids) % 4 == 0 and any(s in self._decode_text(row.ids) for s in req.stops):
            row.done, row.reason = True, "stop"

    def _finish(self, req: Request) -> None:
        self.pool.unreserve(req.reserve)
        req.reserve = 0
        req.weights = (req.weights[0], self.weights_version)
        req.t_done = time.perf_counter()
        req.finished.set()

    # --- decode ------------------------------------------------------------------------------------

    def _launch(self) -> None:
        """Lay the rows out again if they changed, give rows entering a new page that page, launch a step."""
        t0 = time.perf_counter()
        b, p, rows = self.batch, self.page_size, self.active
        layout = None
        if len(rows) != len(self._laid) or any(a is not b for a, b in zip(rows, self._laid)):
            slot = {id(r): i for i, r in enumerate(self._laid)}
            kept = [r for r in rows if id(r) in slot]
            new = [r for r in rows if id(r) not in slot]
            order = kept + new
            layout = Layout(keep=[slot[id(r)] for r in kept], new_tokens=[r.ids[-1] for r in new],
                            new_pages=[list(r.pages) for r in new], positions=[r.n for r in order],
                            steps=[r.planned for r in order], seeds=[r.seed for r in order],
                            inv_temperature=[r.req.inv_temperature for r in order],
                            top_p=[r.req.top_p for r in order])
            self.active, self._laid = order, list(order)
            self._nucleus = any(r.req.top_p < 1 for r in order)
        grown = []
        for i, row in enumerate(self.active):
            if row.n % p == 0 and row.planned < row.req.max_tokens:  # a step it may keep enters a new page
                row.pages.append(self._take(row.req))
                grown.append((i, len(row.pages) - 1, row.pages[-1]))
            row.n += 1
            row.planned += 1
        t1 = time.perf_counter()
        self._inflight.append(b.launch(self.active, self._nucleus, grown, layout))
        self._launched += 1
        self.stats["steps"] += 1
        self.stats["steps_beside_passes"] += bool(self._passes)
        self.stats["row_steps"] += len(self.active)
        self.stats["max_rows_seen"] = max(self.stats["max_rows_seen"], len(self.active))
        self.stats["graphs_captured"], self.stats["failed_captures"] = b.captured, b.failed_captures
        self.stats["host_s"] += t1 - t0
        self.stats["decode_s"] += time.perf_counter() - t1

    def _collect(self) -> None:
        """Read the oldest launched step back: keep its tokens, end rows, free what nothing uses now."""
        t0 = time.perf_counter()
        flight = self._inflight.pop(0)
        toks, lps = self.batch.read(flight)
        t1 = time.perf_counter()
        self._read += 1
        p, ended = self.page_size, []
        for row, tok, lp in zip(flight.rows, toks, lps):
            if row.done:  # it ended at an earlier step: this one ran before the host knew
                continue
            row.written += 1
            if self.prefix_cache and row.written % p == 0 and row.registered < row.written // p:
                j = row.written // p - 1
                row.parent = self.pool.register(row.pages[j], row.parent, row.tokens[j * p:(j + 1) * p])
                row.registered = j + 1
            self._accept(row, tok, lp)
            if row.done:
                ended.append(row)
        if ended:
            gone = {id(r) for r in ended}
            self.active = [r for r in self.active if id(r) not in gone]
            for row in ended:
                self._deferred.append((self._launched, row.pages))  # steps launched so far may still write them
                row.req.live -= 1
                if row.req.live == 0:
                    self._finish(row.req)
        keep = []
        for after, pages in self._deferred:
            if after <= self._read:
                self.pool.release(pages)
            else:
                keep.append((after, pages))
        self._deferred = keep
        self.stats["max_pages_used"] = max(self.stats["max_pages_used"], self.pool.in_use)
        self._gpu_stats()
        self.stats["decode_s"] += t1 - t0
        self.stats["host_s"] += time.perf_counter() - t1

    def _gpu_stats(self) -> None:
        g = self.batch.gpu_s
        self.stats["gpu_decode_s"], self.stats["gpu_prefill_s"] = g["decode"], g["prefill"]

    def _drain(self) -> None:
        while self._inflight:
            self._collect()

    def _decode_text(self, ids: list[int]) -> str:
        return self.tokenizer.decode([t for t in ids if t not in self.end_ids], skip_special_tokens=True)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


