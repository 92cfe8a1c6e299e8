"""Continuous batching of the embedded model: padding bookkeeping, and batched == lone requests."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from mirl.engines import embedded, registry
from mirl.engines.embedded_batch import PaddedKV


def kv_of(rows: int, length: int, fill: float, layers: int = 2):
    return [(torch.full((rows, 2, length, 4), fill + i), torch.full((rows, 2, length, 4), -fill - i))
            for i in range(layers)]


def plain_cache(kv, buffers=None):
    from transformers import DynamicCache

    cache = DynamicCache()
    for i, (k, v) in enumerate(kv):
        cache.update(k.clone(), v.clone(), i)
    return cache


def test_padded_kv_left_pads_masks_and_trims():
    batch = PaddedKV(plain_cache)
    batch.add(kv_of(1, 3, 1.0))
    assert batch.pad == [0] and batch.length == 3 and batch.step_inputs("cpu") == {}
    batch.add(kv_of(2, 5, 10.0))  # longer rows: the first row gets 2 columns of left padding
    assert batch.pad == [2, 0, 0] and batch.length == 5
    keys = batch.layers()[1][0]
    assert keys[0, :, :2].eq(0).all() and keys[0, :, 2:].eq(2.0).all() and keys[1:].eq(11.0).all()
    extra = batch.step_inputs("cpu")
    assert extra["attention_mask"].tolist() == [[0, 0, 1, 1, 1, 1], [1] * 6, [1] * 6]
    assert extra["position_ids"].tolist() == [[3], [5], [5]]  # each row continues its own positions
    batch.add(kv_of(1, 2, 100.0))  # shorter rows are padded, the batch keeps its length
    assert batch.pad == [2, 0, 0, 3]
    batch.keep([0, 3])  # the long rows leave: columns padded in every kept row are dropped
    assert batch.pad == [0, 1] and batch.length == 3
    keys = batch.layers()[0][0]
    assert keys[0].eq(1.0).all() and keys[1, :, :1].eq(0).all() and keys[1, :, 1:].eq(100.0).all()
    batch.regroup([1], [kv_of(2, 1, 7.0), kv_of(1, 5, 8.0)])  # leave and join in one copy
    assert batch.pad == [3, 4, 4, 0] and batch.length == 5  # the kept row is 2 long
    keys = batch.layers()[0][0]
    assert keys[0, :, 3:].eq(100.0).all() and keys[0, :, :3].eq(0).all() and keys[1:3, :, 4:].eq(7.0).all() and keys[3].eq(8.0).all()
    batch.keep([])
    assert batch.pad == [] and batch.length == 0


def conversation(i: int) -> list[dict]:
    return [{"role": "user", "content": f"request {i}: " + "please list the files here " * (1 + 3 * i)}]


def run_together(lm, calls: list[dict], method: str = "generate") -> list:
    """Start every call in its own thread while the model is busy, so they all queue and batch."""
    out: list = [None] * len(calls)
    errors: list = []

    def one(i):
        try:
            out[i] = getattr(lm, method)(**calls[i])
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append((i, e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    with lm._lock:  # the decode thread waits here until every request is queued
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while lm._batcher.queue.qsize() < len(calls) - 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    for t in threads:
        t.join(timeout=120)
    return out if not errors else errors


@pytest.mark.slow
def test_concurrent_requests_decode_as_one_batch_and_match_lone_ones(tmp_path):
    from tests.engines.tiny import tiny_checkpoint

    lm = embedded.EmbeddedLM(tiny_checkpoint(tmp_path), device="cpu", prefill_chunk=8)
    calls = [dict(messages=conversation(0), sample_indices=[0], max_tokens=10, temperature=0.0),
             dict(messages=conversation(1), sample_indices=[0, 1], max_tokens=14, temperature=1.0, seed=5),
             dict(messages=conversation(2), sample_indices=[2], max_tokens=6, temperature=0.8, top_p=0.9, seed=1),
             dict(messages=conversation(3), sample_indices=[0], max_tokens=12, temperature=1.0, seed=9,
                  stop=["files"])]
    lone = [lm.generate(**c) for c in calls]
    assert lm._batcher.max_rows_seen == 2  # one request at a time: at most its own two rows
    together = run_together(lm, calls)
    assert all(g is not None for g in together), together
    assert lm._batcher.max_rows_seen >= 4  # prompts of different lengths shared forward passes
    for a, b in zip(lone, together):
        assert [(s.text, s.output_tokens, s.finish_reason) for s in a.samples] == \
               [(s.text, s.output_tokens, s.finish_reason) for s in b.samples]
        assert a.prompt_tokens == b.prompt_tokens


@pytest.mark.slow
def test_concurrent_token_requests_batch_and_match_lone_ones(tmp_path):
    from tests.engines.tiny import tiny_checkpoint

    lm = embedded.EmbeddedLM(tiny_checkpoint(tmp_path), device="cpu", prefill_chunk=8, prefill_bf16=False)
    calls = [dict(prompt_ids=lm.prompt_ids(conversation(i))[0].tolist(), sample_indices=[0, 1][:1 + i % 2],
                  max_tokens=8 + 2 * i, temperature=(0.0, 1.0, 0.8, 1.3)[i], seed=i) for i in range(4)]
    lone = [lm.generate_tokens(**c) for c in calls]
    lm._batcher.max_rows_seen = 0
    together = run_together(lm, calls, method="generate_tokens")
    assert all(g is not None and not isinstance(g, tuple) for g in together), together
    assert lm._batcher.max_rows_seen >= 4 and lm._batcher.live == 0
    for a, b in zip(lone, together):
        assert [s.ids for s in a.samples] == [s.ids for s in b.samples]
        assert [s.finish_reason for s in a.samples] == [s.finish_reason for s in b.samples]
        for x, y in zip(a.samples, b.samples):  # equal up to float rounding between batch shapes
            assert len(x.logprobs) == len(x.ids) and max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs)) < 1e-4


@pytest.mark.slow
def test_a_failing_request_does_not_take_the_batch_down(tmp_path, monkeypatch):
    from tests.engines.tiny import tiny_checkpoint

    lm = embedded.EmbeddedLM(tiny_checkpoint(tmp_path), device="cpu")
    real = lm._prefill
    bad_len = int(lm.prompt_ids(conversation(1)).shape[1])

    def prefill(ids):
        if ids.shape[1] == bad_len:
            raise RuntimeError("prefill broke")
        return real(ids)

    monkeypatch.setattr(lm, "_prefill", prefill)
    calls = [dict(messages=conversation(i), sample_indices=[0], max_tokens=5, temperature=0.0) for i in range(3)]
    out = run_together(lm, calls)
    assert [i for i, e in out] == [1] and "prefill broke" in str(out[0][1])
    ok = lm.generate(**calls[0])  # the model keeps serving
    assert ok.samples[0].output_tokens > 0


@pytest.mark.slow
def test_smollm2_batched_greedy_matches_lone():
    from .smollm2 import require_smollm2

    require_smollm2()
    lm = registry.get("smollm2")
    calls = [dict(messages=conversation(i), sample_indices=[0], max_tokens=12, temperature=0.0) for i in range(3)]
    lone = [lm.generate(**c) for c in calls]
    together = run_together(lm, calls)
    assert [g.samples[0].text for g in together] == [g.samples[0].text for g in lone]


def test_growing_cache_appends_in_place_and_leaves_its_sources_alone():
    from mirl.engines.embedded_batch import GROW_ROOM, growing_cache

    source = kv_of(2, 3, 1.0)
    kept = [(k.clone(), v.clone()) for k, v in source]
    batch = PaddedKV(growing_cache)
    batch.add(source)
    layer = batch.cache.layers[0]
    buffer = layer._kb
    assert buffer.shape[2] == 3 + GROW_ROOM  # room to grow, taken at the regroup
    k, v = batch.cache.update(torch.full((2, 2, 1, 4), 9.0), torch.full((2, 2, 1, 4), -9.0), 0)
    assert k.shape[2] == 4 and k[:, :, 3].eq(9.0).all() and k[:, :, :3].eq(1.0).all()
    assert layer._kb is buffer and k.data_ptr() == buffer.data_ptr()  # written in place, no copy
    assert all(a.equal(b) and c.equal(d) for (a, c), (b, d) in zip(source, kept))
    for _ in range(GROW_ROOM):  # past the room it moves to a bigger buffer, keeping the contents
        k, v = batch.cache.update(torch.full((2, 2, 1, 4), 5.0), torch.full((2, 2, 1, 4), -5.0), 0)
    assert k.shape[2] == 4 + GROW_ROOM and layer._kb is not buffer
    assert k[:, :, :3].eq(1.0).all() and k[:, :, 3].eq(9.0).all() and k[:, :, 4:].eq(5.0).all()


def test_a_dead_decode_thread_fails_callers_instead_of_hanging():
    from mirl.engines.embedded_batch import DecodeBatcher, Request

    batcher = DecodeBatcher(lm=None)
    batcher.poll_s = 0.05

    def broken():
        raise MemoryError("no room for the batch")

    batcher._serve = broken
    req = Request(ids=None, indices=[0], max_tokens=4, temperature=0.0, top_p=1.0, seed=0, stops=[])
    with pytest.raises(RuntimeError, match="decode thread ended: MemoryError"):
        batcher.run(req)


def test_a_stopped_batcher_is_freed_with_its_last_reference():
    """The exit hook that stops a batcher left running must not hold a stopped one (and its model)."""
    import gc
    import weakref

    from mirl.engines.embedded_batch import DecodeBatcher, Request

    batcher = DecodeBatcher(lm=None)
    queue = batcher.queue

    def serve():  # a decode thread that answers every request at once and ends at stop()
        while (req := queue.get()) is not None:
            req.finished.set()

    batcher._serve = serve
    batcher.run(Request(ids=None, indices=[0], max_tokens=4, temperature=0.0, top_p=1.0, seed=0, stops=[]))
    batcher.stop()
    ref = weakref.ref(batcher)
    del batcher, serve
    gc.collect()
    assert ref() is None
