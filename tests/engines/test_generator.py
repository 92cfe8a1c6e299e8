"""The token-level generator seam on the embedded engine: ids, logprobs, prefix cache, weights, ledger."""

from __future__ import annotations

import pytest
import torch

from mirl.engines import embedded, registry
from mirl.engines.generator import Generator, teacher_forced_logprobs
from mirl.llm.client_generator import ClientGenerator
from mirl.llm.errors import BudgetExceeded
from mirl.llm.ledger import read_ledger

PROMPT = [{"role": "system", "content": "You run shell commands."},
          {"role": "user", "content": "Count the lines of /app/data.txt and print the number. " * 3}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.engines.tiny import tiny_checkpoint

    return tiny_checkpoint(tmp_path_factory.mktemp("tiny-generator"))


@pytest.fixture(scope="module")
def lm(tiny):
    # the default engine, as training gets it: its logprobs must be the float32 learner's
    lm = embedded.EmbeddedLM(tiny, device="cpu", prefill_chunk=8)
    assert lm.prefill_model is lm.model, "the default prefills in another precision than it decodes"
    return lm


def prompt_ids(lm, messages=PROMPT) -> list[int]:
    return lm.prompt_ids(messages)[0].tolist()


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.8), (0.0, 1.0), (1.6, 0.5)])
def test_logprobs_are_the_sampling_distribution_before_top_p(lm, temperature, top_p):
    ids = prompt_ids(lm)
    gen = lm.generate_tokens(ids, [0, 1], max_tokens=12, temperature=temperature, top_p=top_p, seed=4)
    assert isinstance(lm, Generator) and gen.prompt_tokens == len(ids)
    for s in gen.samples:
        assert len(s.ids) == len(s.logprobs) > 0
        assert s.finish_reason == ("stop" if s.ids[-1] in lm.end_ids else "length")
        forced = teacher_forced_logprobs(lm.model, ids, s.ids, temperature)
        assert max(abs(a - b) for a, b in zip(s.logprobs, forced)) < 1e-4, (temperature, top_p)
        if top_p < 1:  # the truncated, renormalized distribution would give larger numbers
            assert any(a < -1e-3 for a in s.logprobs)


def test_token_path_samples_what_the_text_path_samples(lm):
    ids = prompt_ids(lm)
    text = lm.generate(PROMPT, [0, 1, 2], max_tokens=10, temperature=1.0, seed=11)
    toks = lm.generate_tokens(ids, [0, 1, 2], max_tokens=10, temperature=1.0, seed=11)
    assert [lm._decode(s.ids) for s in toks.samples] == [s.text for s in text.samples]
    assert [len(s.ids) for s in toks.samples] == [s.output_tokens for s in text.samples]


def test_prefix_cache_serves_an_appended_prompt_and_changes_nothing(lm):
    ids = prompt_ids(lm)
    lm.clear_prefix_cache()
    first = lm.generate_tokens(ids, [0], max_tokens=6, temperature=1.0, seed=2)
    assert first.cached_tokens == 0
    longer = ids + first.samples[0].ids + lm.tokenizer.encode("\nobservation: 12 lines\n", add_special_tokens=False)
    warm = lm.generate_tokens(longer, [0, 1], max_tokens=6, temperature=0.9, seed=3)
    assert warm.cached_tokens == len(ids) // lm.prefill_chunk * lm.prefill_chunk > 0
    lm.clear_prefix_cache()
    cold = lm.generate_tokens(longer, [0, 1], max_tokens=6, temperature=0.9, seed=3)
    assert cold.cached_tokens == 0
    assert [s.ids for s in warm.samples] == [s.ids for s in cold.samples]
    assert [s.logprobs for s in warm.samples] == [s.logprobs for s in cold.samples]


def test_update_weights_loads_them_and_drops_the_prefix_cache(tiny, tmp_path):
    lm = embedded.EmbeddedLM(tiny, device="cpu", prefill_chunk=8, prefill_bf16=False)
    ids = prompt_ids(lm)
    lm.generate_tokens(ids, [0], max_tokens=4, temperature=0.0)
    assert lm.prefix_cache_size[0] == 1
    torch.manual_seed(1)
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in lm.model.state_dict().items() if v.is_floating_point()}
    lm.update_weights(new)
    assert lm.prefix_cache_size == (0, 0) and lm.weights_version == 1
    after = lm.generate_tokens(ids + [ids[-1]], [0], max_tokens=8, temperature=0.0)
    # a fresh engine on the new weights samples the same ids with the same logprobs
    lm.model.save_pretrained(tmp_path / "new")
    lm.tokenizer.save_pretrained(tmp_path / "new")
    fresh = embedded.EmbeddedLM(tmp_path / "new", device="cpu", prefill_chunk=8, prefill_bf16=False)
    again = fresh.generate_tokens(ids + [ids[-1]], [0], max_tokens=8, temperature=0.0)
    assert after.samples[0].ids == again.samples[0].ids
    assert max(abs(a - b) for a, b in zip(after.samples[0].logprobs, again.samples[0].logprobs)) < 1e-5
    with pytest.raises(KeyError, match="weights not in"):
        lm.update_weights({"no.such.weight": torch.zeros(1)})
    lm._batcher.live = 1  # as if a request were mid-decode
    try:
        with pytest.raises(RuntimeError, match="between generation rounds"):
            lm.update_weights(new)
    finally:
        lm._batcher.live = 0


def test_bad_prompts_are_clear_errors(lm):
    with pytest.raises(ValueError, match="no token ids"):
        lm.generate_tokens([], [0])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        lm.generate_tokens([1, 10**9], [0])


def test_client_generator_counts_calls_in_the_ledger(lm, make_client, scripted):
    name = registry.serve("tiny-generator-test", lm)
    _, scripted_name = scripted(["hi"])
    client = make_client({"policy": name, "teacher": scripted_name}, stage="probe")
    client.config.policy.max_tokens = 5
    assert client.generator("teacher") is None  # text only
    gen = client.generator("policy")
    assert isinstance(gen, ClientGenerator) and gen.tokenizer is lm.tokenizer
    ids = prompt_ids(lm)
    lm.clear_prefix_cache()
    lm.generate_tokens(ids[:-3], [0], max_tokens=1)  # leaves a cached prefix
    out = gen.generate_tokens(ids, [0, 1], seed=1)
    assert all(len(s.ids) <= 5 for s in out.samples)  # the role's max_tokens
    row = read_ledger(client.run_dir).iloc[-1]
    assert (row["role"], row["stage"], row["model"], row["n"]) == ("policy", "probe", name, 2)
    assert row["input_tokens"] == len(ids) and row["output_tokens"] == sum(len(s.ids) for s in out.samples)
    assert row["cached_input_tokens"] == out.cached_tokens > 0
    with pytest.raises(ValueError, match="token path takes only"):
        gen.generate_tokens(ids, [0], stop=["x"])
    client.config.budget_usd = 0.0
    calls = len(read_ledger(client.run_dir))
    with pytest.raises(BudgetExceeded):
        gen.generate_tokens(ids, [0])
    assert read_ledger(client.run_dir).iloc[calls]["error"].startswith("budget")


def test_text_calls_report_the_prefix_cache_in_the_ledger(lm, make_client):
    name = registry.serve("tiny-generator-text", lm)
    client = make_client({"policy": name}, cache=False)
    lm.clear_prefix_cache()
    client.complete("policy", PROMPT, max_tokens=2)
    client.complete("policy", PROMPT + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}],
                    max_tokens=2)
    rows = read_ledger(client.run_dir)
    assert rows["cached_input_tokens"].tolist()[0] == 0 and rows["cached_input_tokens"].tolist()[1] > 0
