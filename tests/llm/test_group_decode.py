"""Group decoding (`mirl.llm.group_decode`), the GPU token path of the transformers engine, run here
eagerly on a CPU (no graphs, no compile): the same contract as every generator."""

from __future__ import annotations

import math

import pytest
import torch

from mirl.llm.generator import Generator, teacher_forced_logprobs
from mirl.llm.group_decode import GroupDecoder, hash32, sample_rows
from mirl.llm.vllm_engine import TransformersEngine


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.llm.test_vllm_engine import tiny_checkpoint

    return tiny_checkpoint(tmp_path_factory.mktemp("tiny-group"))


@pytest.fixture(scope="module")
def engine(tiny):
    e = TransformersEngine(tiny, device="cpu", group_decode=True, prefill_chunk=8)
    assert e.group is not None and not e.group.graphs and not e.group.compiled
    return e


def prompt(engine) -> list[int]:
    return engine.prompt_ids([{"role": "user", "content": "list the files in /app, then count them"}])[0].tolist()


def test_greedy_is_what_generate_decodes(engine):
    ids = prompt(engine)
    gen = engine.generate_tokens(ids, [0, 1, 2], max_tokens=24, temperature=0.0)
    assert isinstance(engine, Generator) and gen.meta["decoder"] == "group"
    with torch.no_grad():
        ref = engine.model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=24, pad_token_id=0)
    want = ref[0, len(ids):].tolist()
    for s in gen.samples:
        assert s.ids == want[:len(s.ids)] and len(s.ids) == len(want)
        tf = teacher_forced_logprobs(engine.model, ids, s.ids)  # greedy stores T = 1
        assert max(abs(a - b) for a, b in zip(tf, s.logprobs)) < 1e-4


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_samples_carry_their_logprobs_and_depend_on_their_own_seed(engine, temperature, top_p):
    ids = prompt(engine)
    group = engine.generate_tokens(ids, [0, 1, 2, 3], max_tokens=16, temperature=temperature, top_p=top_p, seed=7)
    alone = engine.generate_tokens(ids, [2], max_tokens=16, temperature=temperature, top_p=top_p, seed=7)
    assert alone.samples[0].ids == group.samples[2].ids  # (seed, index) reproduces outside its group
    assert len({tuple(s.ids) for s in group.samples}) > 1
    for s in group.samples:
        tf = teacher_forced_logprobs(engine.model, ids, s.ids, temperature)  # before top-p
        assert len(s.logprobs) == len(s.ids) and max(abs(a - b) for a, b in zip(tf, s.logprobs)) < 1e-4
    other = engine.generate_tokens(ids, [0], max_tokens=16, temperature=temperature, top_p=top_p, seed=8)
    assert other.samples[0].ids != group.samples[0].ids


def test_a_tiny_nucleus_keeps_only_the_top_token(engine):
    ids = prompt(engine)
    greedy = engine.generate_tokens(ids, [0], max_tokens=12, temperature=0.0).samples[0]
    nucleus = engine.generate_tokens(ids, [0, 1], max_tokens=12, temperature=0.8, top_p=1e-6, seed=3)
    for s in nucleus.samples:
        assert s.ids == greedy.ids
        tf = teacher_forced_logprobs(engine.model, ids, s.ids, 0.8)
        assert max(abs(a - b) for a, b in zip(tf, s.logprobs)) < 1e-4


def test_an_end_token_stops_its_row(engine):
    ids = prompt(engine)
    greedy = engine.generate_tokens(ids, [0], max_tokens=12, temperature=0.0).samples[0]
    saved = engine.end_ids
    engine.end_ids = {greedy.ids[4]}
    try:
        s = engine.generate_tokens(ids, [0, 1], max_tokens=12, temperature=0.0).samples[1]
    finally:
        engine.end_ids = saved
    first = greedy.ids.index(greedy.ids[4])
    assert s.ids == greedy.ids[:first + 1] and s.finish_reason == "stop"
    assert greedy.finish_reason == "length" and len(greedy.ids) == 12


def test_the_prompt_kv_comes_from_the_prefix_cache(engine):
    ids = prompt(engine)
    engine.generate_tokens(ids, [0], max_tokens=4, temperature=0.0)
    again = engine.generate_tokens(ids + [5, 6, 7], [0], max_tokens=4, temperature=0.0)
    assert again.cached_tokens == len(ids) // 8 * 8 > 0
    with torch.no_grad():
        ref = engine.model.generate(torch.tensor([ids + [5, 6, 7]]), do_sample=False, max_new_tokens=4, pad_token_id=0)
    assert again.samples[0].ids == ref[0, len(ids) + 3:].tolist()


def test_gumbel_max_draws_from_the_softmax():
    """Frequencies of 20,000 rows' draws (one hashed key each) against softmax(logits / T)."""
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    rows, t = 20000, 0.8
    keys = hash32(torch.arange(rows, dtype=torch.long) * 7919 + 11)
    tok, lp = sample_rows(logits.expand(rows, -1), keys, hash32(torch.arange(6, dtype=torch.long)),
                          torch.tensor([1 / t]), greedy=False, top_p=1.0)
    p = torch.softmax(logits / t, -1)
    freq = torch.bincount(tok, minlength=6).float() / rows
    assert (freq - p).abs().max() < 4 * math.sqrt(0.25 / rows)  # 4 sigma
    assert torch.allclose(lp, torch.log(p)[tok], atol=1e-6)


def test_unsupported_models_keep_the_batched_decoder():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=32))
    assert not GroupDecoder.supports(model)
    with pytest.raises(ValueError, match="does not support"):
        GroupDecoder(model)
