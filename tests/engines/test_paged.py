"""The continuous-batching engine (`mirl.engines.paged`), run here eagerly on a CPU (no graphs, no
compile, the torch attention): the contract of every generator, and what continuous batching adds
(requests joining and leaving a running batch, a row's draws independent of its neighbours, the
prefix cache, weights swapped between steps, per-request stop ids and lengths)."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest
import torch

from mirl.engines.generator import ContextLengthError, Generator, teacher_forced_logprobs
from mirl.engines.paged import PagedEngine
from mirl.engines.paged.sampler import hash32, sample
from tests.engines.tiny import tiny_checkpoint

TASK = [{"role": "user", "content": "list the files in /app, then count them"}]


@pytest.fixture(scope="module", params=["llama", "qwen2", "qwen3"])
def family_checkpoint(request, tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp(f"tiny-{request.param}"), request.param)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny-paged"), "qwen3")


def make(ckpt, **kw) -> PagedEngine:
    kw = {"device": "cpu", "dtype": "float32", "page_size": 4, "kv_tokens": 8192, "prefill_tokens": 16, **kw}
    return PagedEngine(ckpt, **kw)


@pytest.fixture(scope="module")
def engine(checkpoint):
    e = make(checkpoint)
    yield e
    e.close()


def generate_ref(engine, ids, n):
    with torch.no_grad():
        out = engine.model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=n, pad_token_id=0)
    return out[0, len(ids):].tolist()


def max_diff(a, b) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


def test_greedy_is_what_generate_decodes_with_the_learners_logprobs(family_checkpoint):
    e = make(family_checkpoint)
    ids = e.prompt_ids(TASK)
    gen = e.generate_tokens(ids, [0, 1, 2], max_tokens=24, temperature=0.0)
    assert isinstance(e, Generator) and gen.meta["decoder"] == "paged"
    want = generate_ref(e, ids, 24)
    for s in gen.samples:
        assert s.ids == want and s.finish_reason == "length"
        assert max_diff(teacher_forced_logprobs(e.model, ids, s.ids), s.logprobs) < 1e-4  # greedy stores T = 1
    e.close()


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_samples_carry_their_logprobs_before_top_p_and_depend_on_their_own_seed(engine, temperature, top_p):
    ids = engine.prompt_ids(TASK)
    group = engine.generate_tokens(ids, [0, 1, 2, 3], max_tokens=16, temperature=temperature, top_p=top_p, seed=7)
    alone = engine.generate_tokens(ids, [2], max_tokens=16, temperature=temperature, top_p=top_p, seed=7)
    assert alone.samples[0].ids == group.samples[2].ids  # (seed, index) reproduces outside its group
    assert len({tuple(s.ids) for s in group.samples}) > 1
    for s in group.samples:
        tf = teacher_forced_logprobs(engine.model, ids, s.ids, temperature)
        assert len(s.logprobs) == len(s.ids) and max_diff(tf, s.logprobs) < 1e-4
    other = engine.generate_tokens(ids, [0], max_tokens=16, temperature=temperature, top_p=top_p, seed=8)
    assert other.samples[0].ids != group.samples[0].ids


def test_a_tiny_nucleus_keeps_only_the_top_token(engine):
    ids = engine.prompt_ids(TASK)
    greedy = engine.generate_tokens(ids, [0], max_tokens=12, temperature=0.0).samples[0]
    nucleus = engine.generate_tokens(ids, [0, 1], max_tokens=12, temperature=0.8, top_p=1e-6, seed=3)
    for s in nucleus.samples:
        assert s.ids == greedy.ids
        assert max_diff(teacher_forced_logprobs(engine.model, ids, s.ids, 0.8), s.logprobs) < 1e-4


def prompts(engine, n):
    """n different prompts of different lengths (each its own task text)."""
    return [engine.prompt_ids([{"role": "user", "content": "do step " + "and then more " * (i % 5) + str(i)}])
            for i in range(n)]


def concurrently(fn, args):
    out, errors = [None] * len(args), []

    def run(i):
        try:
            out[i] = fn(*args[i])
        except Exception as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return out


GRAPH_BOOKKEEPING = {"_graphs", "_pool", "_pools", "_failed_graphs", "_eager", "_scratch", "captured", "failed_captures",
                     "_timed"}


def padded(e: PagedEngine, replay: bool = False) -> list[tuple[int, int]]:
    """Pad `e`'s decode steps to buckets as on a GPU (where graphs replay fixed shapes), eagerly here;
    returns the (rows, bucket) pairs of the steps to come. With `replay`, the batch's `_run` acts as a
    CUDA graph does: the first step run for a key is the one every later run of that key runs (the Python
    values it was built with are baked in), and a step may change none of the batch's host attributes (a
    replay runs no Python)."""
    from mirl.engines.paged.batch import BUCKETS

    e._allocate()
    b = e.batch
    assert b.max_rows in BUCKETS, "buffers are sized for max_rows: pad only where that is a bucket"
    b.padded = True
    seen, bucket_for = [], b.bucket_for

    if replay:
        first: dict = {}

        def host(obj) -> dict:
            return {k: v if isinstance(v, (int, float, str, bool, tuple, type(None))) else id(v)
                    for k, v in vars(obj).items() if k not in GRAPH_BOOKKEEPING and not isinstance(v, torch.Tensor)}

        def run(key, step):
            step = first.setdefault(key, step)
            before = host(b)
            step()
            after = host(b)
            assert before == after, (key, {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)})

        b._run = run

    def record(rows):
        seen.append((rows, bucket_for(rows)))
        return seen[-1][1]

    e.batch.bucket_for = record
    return seen


def late_first_tokens(monkeypatch, polls: int = 3) -> None:
    """First tokens come back only after `polls` asks, as a pass on a GPU's side stream does while decode
    steps run (on a CPU everything is done by the time it is launched)."""
    from mirl.engines.paged.batch import Flight

    asked: dict = {}

    def ready(self):
        asked[id(self)] = asked.get(id(self), 0) + 1
        return asked[id(self)] > polls

    monkeypatch.setattr(Flight, "ready", ready)


@pytest.mark.parametrize("pad", [False, True, "replay", "late"], ids=["exact", "padded", "replayed", "late"])
def test_requests_join_and_leave_a_running_batch_and_each_gets_what_it_gets_alone(checkpoint, pad, monkeypatch):
    """Twelve threads with their own prompts, sample counts, lengths and temperatures: they decode in
    shared steps (far fewer steps than alone, more than one row at a time), and every sample equals
    the same request run alone on a fresh engine; also with the steps padded to buckets, as on a GPU
    (padding slots must write only page 0, and a new layout keeps each row's pages), with the device
    steps replayed as graphs replay them, and with prefill passes' first tokens coming back late (up to
    two passes ahead), so that rows decode while passes are out and join when their tokens are back."""
    busy = make(checkpoint)
    seen = padded(busy, replay=pad == "replay") if pad in (True, "replay") else []
    if pad == "late":
        late_first_tokens(monkeypatch)
        busy.prefill_ahead = 2
    ps = prompts(busy, 12)
    args = [(p, list(range(i % 3 + 1)), 6 + 3 * (i % 4), 0.0 if i % 4 == 0 else 0.9, 1.0, i) for i, p in enumerate(ps)]
    both = concurrently(lambda *a: busy.generate_tokens(*a), args)
    steps_together = busy.stats["steps"]
    assert busy.stats["max_rows_seen"] > 4
    solo = make(checkpoint)
    for a, got in zip(args, both):
        want = solo.generate_tokens(*a)
        assert [s.ids for s in got.samples] == [s.ids for s in want.samples]
        assert all(len(s.ids) == a[2] or s.finish_reason == "stop" for s in got.samples)
        for s in got.samples:
            assert max_diff(teacher_forced_logprobs(busy.model, a[0], s.ids, a[3] if a[3] > 0 else 1.0), s.logprobs) < 1e-4
    assert steps_together < solo.stats["steps"] / 2
    assert busy.pool.in_use == 0 and busy.pool.reserved == 0  # every page freed (cached ones wait idle), none promised
    assert pad not in (True, "replay") or any(b > r for r, b in seen), seen  # steps with padding slots ran
    assert (busy.stats["steps_beside_passes"] > 0) == (pad == "late"), busy.stats  # rows decoded while passes were out
    busy.close()
    solo.close()


def test_rows_whose_first_tokens_are_out_count_against_max_rows(checkpoint, monkeypatch):
    """A pass's requests wait for their first tokens outside both the prefilling list and the decoding rows:
    admission still counts their rows, or more rows than the buffers hold would join one step."""
    late_first_tokens(monkeypatch, polls=2)
    e = make(checkpoint, max_rows=4, prefill_tokens=8)
    e.prefill_ahead = 2
    ps = prompts(e, 6)
    args = [(p, [0, 1], 8, 1.0, 1.0, i) for i, p in enumerate(ps)]
    outs = concurrently(lambda *a: e.generate_tokens(*a), args)
    assert all(len(s.ids) == 8 for o in outs for s in o.samples)
    assert e.stats["steps_beside_passes"] > 0 and e.stats["max_rows_seen"] <= 4, e.stats
    e.close()


def test_a_row_draws_the_same_in_an_empty_and_in_a_busy_batch(checkpoint):
    e = make(checkpoint, prefill_tokens=64)
    ids = e.prompt_ids(TASK)
    alone = e.generate_tokens(ids, [5], max_tokens=20, temperature=1.0, seed=11).samples[0].ids
    ps = prompts(e, 8)
    args = [(p, [0, 1, 2], 20, 1.0, 1.0, 100 + i) for i, p in enumerate(ps)] + [(ids, [5], 20, 1.0, 1.0, 11)]
    outs = concurrently(lambda *a: e.generate_tokens(*a), args)
    assert e.stats["max_rows_seen"] >= 10
    assert outs[-1].samples[0].ids == alone
    e.close()


@pytest.mark.parametrize("pad", [False, True, "replay"], ids=["exact", "padded", "replayed"])
def test_requests_whose_prompts_go_in_together_start_in_one_call_and_each_draws_as_alone(checkpoint, monkeypatch, pad):
    """Six requests queued before the owner thread runs go in in one prefill pass, and their rows' first
    tokens are sampled in one batched call (each row from its own prompt's logits, with its own seed,
    temperature and top-p, its partial last page copied): every sample still equals the request alone;
    also with the decode steps padded to a bucket of rows, as on a GPU, and replayed as graphs replay them."""
    e = make(checkpoint, prefill_tokens=512)
    seen = padded(e, replay=pad == "replay") if pad else []
    ps = prompts(e, 6)
    args = [(p, list(range(i % 3 + 1)), 8, (0.0, 0.7, 1.0)[i % 3], (1.0, 0.8)[i % 2], 50 + i) for i, p in enumerate(ps)]
    assert len({len(p) % e.page_size for p in ps}) > 1  # partial last pages of different lengths
    start = e._ensure_thread
    monkeypatch.setattr(e, "_ensure_thread", lambda: None)  # hold the owner thread back until all are queued
    out: list = [None] * len(args)

    def run(i):
        out[i] = e.generate_tokens(*args[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 4  # callers see a missing owner thread as an error after 5 s
    while e._queue.qsize() < len(args) and time.monotonic() < deadline:
        time.sleep(0.01)
    monkeypatch.undo()
    start()
    for t in threads:
        t.join(60)
    assert e.stats["prefill_passes"] == 1 and e.stats["requests"] == len(args)
    assert not pad or seen[0] == (12, 16), seen  # the first step: 12 rows in a bucket of 16
    solo = make(checkpoint)
    for a, got in zip(args, out):
        want = solo.generate_tokens(*a)
        assert [s.ids for s in got.samples] == [s.ids for s in want.samples]
        assert max_diff([x for s in got.samples for x in s.logprobs], [x for s in want.samples for x in s.logprobs]) < 1e-5
    e.close()
    solo.close()


def test_a_failure_while_rows_start_fails_their_requests_and_the_engine_serves_on(checkpoint, monkeypatch):
    """Rows start after their prompt's pass (their first tokens sampled): a failure there answers the
    request with the error instead of leaving its caller waiting, and the next request is served."""
    from mirl.engines.paged.batch import DeviceBatch

    e = make(checkpoint)
    ids = e.prompt_ids(TASK)

    def boom(*a, **k):
        raise RuntimeError("first tokens failed")

    monkeypatch.setattr(DeviceBatch, "first_tokens", boom)
    got: list = []

    def call():
        try:
            e.generate_tokens(ids, [0, 1], max_tokens=4, temperature=1.0)
        except RuntimeError as err:
            got.append(str(err))

    t = threading.Thread(target=call)
    t.start()
    t.join(30)
    assert got == ["first tokens failed"]
    monkeypatch.undo()
    assert len(e.generate_tokens(ids, [0], max_tokens=4, temperature=0.0).samples[0].ids) == 4
    e.close()


def test_a_failure_before_new_weights_answers_every_message_it_came_with(checkpoint, monkeypatch):
    """New weights wait for what is in flight; if that fails, the caller of `update_weights` hears of it, and
    a request that came in the same batch of messages is answered, not left waiting."""
    from mirl.engines.paged.engine import PagedEngine, Request

    e = make(checkpoint)
    ids = e.prompt_ids(TASK)

    def boom(self):
        raise RuntimeError("drain failed")

    monkeypatch.setattr(PagedEngine, "_drain", boom)
    done, box = threading.Event(), []
    req = Request(prompt=ids, indices=[0], max_tokens=3, inv_temperature=0.0, top_p=1.0, seed=0,
                  stop_ids=frozenset())
    e._queue.put(("weights", {}, done, box, None))
    e._queue.put(req)  # both queued before the owner thread starts: one batch of messages
    e._ensure_thread()
    assert done.wait(30) and [str(x) for x in box] == ["drain failed"]
    assert req.finished.wait(30) and str(req.error) == "drain failed"
    monkeypatch.undo()
    assert len(e.generate_tokens(ids, [0], max_tokens=4, temperature=0.0).samples[0].ids) == 4
    e.close()


def test_an_engine_runs_its_process_at_a_short_thread_switch_interval(checkpoint):
    """The owner thread waits for the GIL after every torch call: a process that starts an engine lowers
    the switch interval (never raises it)."""
    import sys

    from mirl.engines.paged.engine import SWITCH_INTERVAL

    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        e = make(checkpoint)
        e.generate_tokens(e.prompt_ids(TASK), [0], max_tokens=2, temperature=0.0)
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL)
        e.close()
        sys.setswitchinterval(SWITCH_INTERVAL / 5)
        e = make(checkpoint)
        e.generate_tokens(e.prompt_ids(TASK), [0], max_tokens=2, temperature=0.0)
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL / 5)
        e.close()
    finally:
        sys.setswitchinterval(before)


def test_the_host_side_of_a_step_and_of_a_pass_makes_few_torch_calls(checkpoint):
    """Each torch call of the owner thread waits for the GIL again while episode threads run Python: a
    step's host data goes in one staging copy and a pass's new rows start in one call. Counted on 16
    requests that go in in one pass (`tests/engines/host_calls.py`, deterministic): the engine before
    this (a copy per field, a call per request and per row) made 16.25 calls a decode step and 220 in the
    pass; then 5.96 and 23; now 1.04 a step (its replay, the layout's once; a GPU adds the staging copy,
    the read-back's copy, its event and the wait: no slicing, the tokens read through numpy) and 3 a pass
    (its replay, the first tokens' replay and their read-back; a GPU adds the two staging copies)."""
    from tests.engines.host_calls import host_calls

    got = host_calls(checkpoint, episodes=16, workload="together")
    assert got["requests"] == 16 and got["prefill_passes"] == 1 and got["decode_steps"] == 24, got
    assert 1 <= got["host_calls_per_decode_step"] <= 2, got  # at least the replay: counted
    assert 2 <= got["host_calls_per_prefill_pass"] <= 4, got


def test_rows_that_end_at_their_first_token_give_their_pages_back(checkpoint):
    """A row whose first token ends it (max_tokens 1, or a stop id) never decodes: its own partial page and
    its hold on the prompt's pages go back when it starts, or the pool runs dry request by request."""
    e = make(checkpoint)
    ids = e.prompt_ids(TASK)
    ids = ids[:len(ids) - (len(ids) % e.page_size == 0)]  # a partial last page: each row copies it into its own
    first = e.generate_tokens(ids, [0], max_tokens=2, temperature=0.0).samples[0].ids[0]
    for _ in range(3):
        assert [len(s.ids) for s in e.generate_tokens(ids, [0, 1, 2], max_tokens=1).samples] == [1, 1, 1]
        stopped = e.generate_tokens(ids, [0, 1], max_tokens=8, temperature=0.0, stop_ids=[first]).samples
        assert [s.finish_reason for s in stopped] == ["stop", "stop"]
        deadline = time.time() + 30  # the owner frees the last step's pages just after answering
        while e.pool.in_use and time.time() < deadline:
            time.sleep(0.01)
        assert e.pool.in_use == 0 and e.pool.reserved == 0
    e.close()


def test_a_long_prompt_prefills_in_chunks_between_decode_steps(checkpoint):
    """A short request that starts decoding while a 400-token prompt prefills (16 tokens a step)
    finishes before that prompt is in: chunks of prefill do not stall the decoding rows."""
    e = make(checkpoint, prefill_tokens=16)
    short = e.prompt_ids(TASK)
    long = e.prompt_ids([{"role": "user", "content": "explain " * 400}])
    assert len(long) > 400
    first = {}

    def run_short():
        first["short"] = e.generate_tokens(short, [0], max_tokens=8, temperature=0.0)

    t = threading.Thread(target=run_short)
    t.start()
    while e.stats["steps"] == 0:  # the short request is decoding
        time.sleep(0.001)
    got = e.generate_tokens(long, [0], max_tokens=4, temperature=0.0)
    t.join(60)
    assert first["short"].seconds < got.meta["queued_s"]
    assert e.stats["prefill_passes"] > len(long) // 16
    e.close()


def test_a_closed_engine_is_freed_with_its_last_reference(checkpoint):
    """A process that evaluates policy after policy closes each engine: its KV pool and weights must go
    with it, not stay on the GPU until the process ends (the exit hook held every engine ever started)."""
    e = make(checkpoint)
    e.generate_tokens(e.prompt_ids(TASK), [0], max_tokens=2, temperature=0.0)
    ref = weakref.ref(e)
    e.close()
    del e
    gc.collect()
    assert ref() is None


def test_stop_ids_and_max_tokens_per_request(engine):
    ids = engine.prompt_ids(TASK)
    greedy = engine.generate_tokens(ids, [0], max_tokens=12, temperature=0.0).samples[0]
    assert greedy.finish_reason == "length" and len(greedy.ids) == 12
    stop = greedy.ids[4]
    cut = engine.generate_tokens(ids, [0, 1], max_tokens=12, temperature=0.0, stop_ids=[stop])
    first = greedy.ids.index(stop)
    for s in cut.samples:
        assert s.ids == greedy.ids[:first + 1] and s.finish_reason == "stop"
    short = engine.generate_tokens(ids, [0], max_tokens=3, temperature=0.0).samples[0]
    assert short.ids == greedy.ids[:3]


def test_a_prefill_pass_s_time_is_split_into_its_parts(checkpoint):
    """What e2e_bench reads to say where a pass goes: building, launching, first tokens launched (each
    counted, within the pass's time), then their read-back and the rows' start (after it)."""
    e = make(checkpoint)
    e.generate_tokens(e.prompt_ids(TASK), [0, 1], max_tokens=3, temperature=0.0)
    s = e.stats
    parts = s["prefill_build_s"] + s["prefill_launch_s"] + s["first_tokens_s"]
    assert s["prefill_build_s"] > 0 and s["prefill_launch_s"] > 0 and s["first_tokens_s"] > 0
    assert parts <= s["prefill_s"] and s["first_read_s"] > 0
    assert s["gpu_decode_s"] == s["gpu_prefill_s"] == 0  # no CUDA events off a GPU
    e.close()


def test_a_prompt_past_the_context_names_both_lengths(checkpoint):
    e = make(checkpoint, max_model_len=64)
    with pytest.raises(ContextLengthError, match=r"prompt of 60 tokens \+ max_tokens 10 exceeds the context .* 64"):
        e.generate_tokens([5] * 60, [0], max_tokens=10)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        e.generate_tokens([10**7], [0], max_tokens=2)


def test_the_next_turn_takes_its_prefix_from_the_cache_and_decodes_as_cold(checkpoint):
    e = make(checkpoint)
    ids = e.prompt_ids(TASK)
    turn = e.generate_tokens(ids, [0], max_tokens=10, temperature=0.9, seed=4).samples[0]
    follow = ids + turn.ids + e.tokenizer.encode("\nfile1 file2\n")
    warm = e.generate_tokens(follow, [0, 1], max_tokens=10, temperature=0.9, seed=5)
    assert warm.cached_tokens == (len(ids) + len(turn.ids)) // 4 * 4 > 0  # whole pages of the last turn
    cold = make(checkpoint).generate_tokens(follow, [0, 1], max_tokens=10, temperature=0.9, seed=5)
    assert cold.cached_tokens == 0
    assert [s.ids for s in warm.samples] == [s.ids for s in cold.samples]
    e.close()


def test_new_weights_apply_at_the_next_step_and_drop_the_cached_prefixes(checkpoint, tmp_path):
    e = make(checkpoint)
    ids = e.prompt_ids(TASK)
    before = e.generate_tokens(ids, [0, 1], max_tokens=16, temperature=1.0, seed=2)
    torch.manual_seed(1)
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in e.model.state_dict().items()}
    holder = {}

    def long_request():
        holder["gen"] = e.generate_tokens(ids, [0], max_tokens=200, temperature=1.0, seed=3)

    t = threading.Thread(target=long_request)
    steps = e.stats["steps"]
    t.start()
    while e.stats["steps"] < steps + 5:  # it is decoding
        time.sleep(0.001)
    e.update_weights(new)  # returns once the owner thread has swapped them in between two steps
    t.join(120)
    assert holder["gen"].meta["weights_version"] == [0, 1]  # it decoded across the swap
    after = e.generate_tokens(ids, [0, 1], max_tokens=16, temperature=1.0, seed=2)
    assert after.cached_tokens == 0  # what was cached was computed with the old weights
    fresh_dir = tmp_path / "new"
    e.model.save_pretrained(fresh_dir)
    e.tokenizer.save_pretrained(fresh_dir)
    fresh = make(fresh_dir)
    want = fresh.generate_tokens(ids, [0, 1], max_tokens=16, temperature=1.0, seed=2)
    assert [s.ids for s in after.samples] == [s.ids for s in want.samples]
    assert [s.ids for s in after.samples] != [s.ids for s in before.samples]
    for s in after.samples:
        assert max_diff(teacher_forced_logprobs(fresh.model, ids, s.ids), s.logprobs) < 1e-4
    with pytest.raises(KeyError, match="not in"):
        e.update_weights({"no.such.weight": torch.zeros(1)})
    e.close()
    fresh.close()


def test_requests_wait_for_pages_and_one_too_big_for_the_pool_is_an_error(checkpoint):
    e = make(checkpoint, kv_tokens=4 * 60)  # 59 usable pages of 4 tokens
    ids = e.prompt_ids(TASK)  # ~40 tokens: one request of 2 x 20 tokens needs 10 + 2 x 6 pages
    outs = concurrently(lambda *a: e.generate_tokens(*a), [(ids, [0, 1], 20, 0.0, 1.0, i) for i in range(4)])
    assert all(len(s.ids) == 20 for g in outs for s in g.samples)
    assert e.stats["max_pages_used"] <= 59
    with pytest.raises(RuntimeError, match="needs .* KV pages; the pool has 59"):
        e.generate_tokens(ids, list(range(8)), max_tokens=60)
    again = e.generate_tokens(ids, [0], max_tokens=4, temperature=0.0)  # the engine goes on
    assert len(again.samples[0].ids) == 4
    e.close()


def test_text_calls_cut_at_stop_strings(engine):
    gen = engine.generate(TASK, [0, 1], max_tokens=12, temperature=0.0)
    text = gen.samples[0].text
    assert gen.samples[0].output_tokens == 12 and len(text) > 4
    stop = text[3:5]
    cut = engine.generate(TASK, [0], max_tokens=12, temperature=0.0, stop=stop)
    assert cut.samples[0].text == text[:text.index(stop)] and cut.samples[0].finish_reason == "stop"


def test_the_sampler_draws_from_the_softmax():
    """Frequencies of 20,000 rows' draws (one seed each) against softmax(logits / T)."""
    import math

    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    rows, t = 20000, 0.8
    tok, lp = sample(logits.expand(rows, -1), torch.arange(rows, dtype=torch.long) * 7919 + 11,
                     torch.zeros(rows, dtype=torch.long), torch.full((rows,), 1 / t), torch.ones(rows),
                     hash32(torch.arange(6, dtype=torch.long)), nucleus=False)
    p = torch.softmax(logits / t, -1)
    freq = torch.bincount(tok, minlength=6).float() / rows
    assert (freq - p).abs().max() < 4 * math.sqrt(0.25 / rows)  # 4 sigma
    assert torch.allclose(lp, torch.log(p)[tok], atol=1e-6)


def test_unsupported_models_are_refused_with_the_reason(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from mirl.engines.paged.model import PagedModel, supports_config

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=32))
    model.save_pretrained(tmp_path)
    assert not supports_config(tmp_path)
    with pytest.raises(ValueError, match="does not support model type 'gpt2'"):
        PagedModel(model, 32)


def test_the_registry_serves_a_checkpoint_with_the_paged_engine_when_asked(checkpoint):
    from mirl.engines.registry import policy_engine

    e = policy_engine(checkpoint, backend="paged", device="cpu", dtype="float32")
    assert isinstance(e, PagedEngine)
    assert e.generate(TASK, [0], max_tokens=3, temperature=0.0).samples[0].output_tokens == 3
    e.close()


def test_a_forgotten_engine_is_closed_and_freed(checkpoint):
    """`registry.forget` (checkpoint selection drops each candidate's engine before the next) ends the
    engine's owner thread, so its memory goes with the last reference."""
    from mirl.engines import registry

    e = make(checkpoint)
    name = registry.serve("paged-forget-test", e)
    assert e.generate(TASK, [0], max_tokens=2, temperature=0.0).samples[0].output_tokens == 2
    thread, ref = e._thread, weakref.ref(e)
    registry.forget(name.removeprefix("local/"))
    assert not thread.is_alive()
    del e
    gc.collect()
    assert ref() is None


def test_a_one_token_prompt_decodes_as_generate(engine):
    gen = engine.generate_tokens([17], [0], max_tokens=8, temperature=0.0)  # a pass of one token is padded
    assert gen.samples[0].ids == generate_ref(engine, [17], 8)


@pytest.mark.parametrize("compiled", [True, False])
def test_engines_in_one_process_compile_one_at_a_time(compiled):
    """Two engines' steps that may compile (a first run, or every run without graphs) never overlap:
    while one thread traces for torch.compile, a compiled call in another raises, and inside a graph
    capture that breaks the engine for good (seen on a GPU with two policies evaluated at once)."""
    import threading
    import time
    from types import SimpleNamespace

    from mirl.engines.paged.batch import DeviceBatch

    inside, most, lock = [0], [0], threading.Lock()

    def step():
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)
        with lock:
            inside[0] -= 1

    batches = [SimpleNamespace(graphs=False, compiled=compiled) for _ in range(2)]
    start = threading.Barrier(2)

    def engine(b):
        start.wait()
        for _ in range(3):
            DeviceBatch._run(b, ("decode", 8, False), step)

    threads = [threading.Thread(target=engine, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == (1 if compiled else 2)  # eager engines run side by side


def test_every_compiled_call_of_an_engine_holds_the_compile_lock(checkpoint):
    """A compiled engine calls its compiled code (the steps, and the sampler of a request's first tokens)
    only while holding `COMPILE_LOCK`; the CPU engine is eager, so the calls are watched instead."""
    from mirl.engines.compile_lock import COMPILE_LOCK
    from mirl.engines.paged import model as paged_model

    e = make(checkpoint)
    held = []

    def watched(fn):
        def call(*a, **kw):
            held.append(COMPILE_LOCK._is_owned())
            return fn(*a, **kw)
        return call

    try:
        e.compiled = True  # as on a GPU: the batch made at the first request takes it over
        e._sample = watched(e._sample)
        e.pm._pre, e.pm._post, e.pm._final = (watched(f) for f in (paged_model.pre_attention,
                                                                    paged_model.post_attention,
                                                                    paged_model.final_norm))
        e.generate_tokens([5, 6, 7, 8, 9], [0, 1], max_tokens=4, temperature=1.0)
    finally:
        e.close()
    assert held and all(held)


def test_a_key_whose_capture_failed_runs_eagerly_and_is_not_captured_again(monkeypatch):
    """The CUDA calls of a capture, faked on a CPU: the capture fails at its end (as an invalidated
    capture does); that step's outputs are its warm-up's, the pool is given up, and later steps of the
    key run eagerly instead of failing a capture each time."""
    import contextlib
    import types

    from mirl.engines.paged.batch import DeviceBatch

    captures, streams_set = [], []

    class Stream:
        def wait_stream(self, other):
            pass

    @contextlib.contextmanager
    def failing_graph(graph, pool=None, stream=None, capture_error_mode=None):
        captures.append(pool)
        yield
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    cuda = torch.cuda
    monkeypatch.setattr(cuda, "Stream", lambda device=None: Stream())
    monkeypatch.setattr(cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(cuda, "CUDAGraph", lambda: types.SimpleNamespace(replay=lambda: None))
    monkeypatch.setattr(cuda, "graph_pool_handle", lambda: ("pool", len(captures)))
    monkeypatch.setattr(cuda, "graph", failing_graph)
    monkeypatch.setattr(cuda, "set_stream", streams_set.append)
    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", lambda device, pool: None, raising=False)
    b = types.SimpleNamespace(graphs=True, compiled=True, device=torch.device("cuda", 0), _graphs={}, _pool={},
                              _capture={"decode": Stream(), "side": Stream()}, _failed_graphs=[], _eager=set(),
                              captured=0, failed_captures=0)
    b._abandon_pool = types.MethodType(DeviceBatch._abandon_pool, b)
    runs = []
    key = ("decode", 8, False)
    DeviceBatch._run(b, key, lambda: runs.append(1))
    # the warm-up, whose outputs are the step's, and the capture (which runs nothing on a GPU); not a
    # third run: a decode step advances its rows, so running it again would skip a token
    assert len(runs) == 2
    assert key in b._eager and b.failed_captures == 1 and b._pool["decode"] is None and len(streams_set) == 1
    for _ in range(3):
        DeviceBatch._run(b, key, lambda: runs.append(1))
    assert len(runs) == 5 and len(captures) == 1 and b.captured == 0


def test_a_process_sizes_its_kv_pages_from_its_share_of_the_gpu(monkeypatch):
    """`mirl batch --parallel N` gives each training 1/N of the GPU (MIRL_GPU_SHARE); a bad value is named."""
    from mirl.engines import GPU_SHARE_ENV
    from mirl.engines.paged.engine import gpu_share

    monkeypatch.delenv(GPU_SHARE_ENV, raising=False)
    assert gpu_share() == 1.0
    monkeypatch.setenv(GPU_SHARE_ENV, "0.25")
    assert gpu_share() == 0.25
    for bad in ("0", "1.5", "half"):
        monkeypatch.setenv(GPU_SHARE_ENV, bad)
        with pytest.raises(ValueError, match=f"MIRL_GPU_SHARE='{bad}'"):
            gpu_share()


def test_a_staging_ring_sends_each_buffer_what_was_just_written_in_it():
    """The GPU path of `Staging` (a ring of host buffers, one copy a send, its slices made once per buffer
    and length), between CPU tensors: round the ring three times with alternating lengths, each send
    carries what was just written into the buffer it sends from."""
    from mirl.engines.paged.batch import RING, Clock, Staging

    s = Staging(64, torch.device("cpu"), Clock())
    s.cuda = True
    s.host = [torch.zeros(64, dtype=torch.long) for _ in range(RING)]
    s.arrays, s.sent = [h.numpy() for h in s.host], [0] * RING
    for step in range(3 * RING):
        n = (8, 16)[step % 2]
        a = s.begin()
        a[:n] = step + 1
        s.clock.synced = s.clock.enqueued
        assert (s.send(n)[:n] == step + 1).all(), step
