"""The choice of engine for a checkpoint (`mirl.engines.registry`) and the vLLM engine: on a GPU when
vLLM is installed (skipped otherwise), and its request/response mapping against a stand-in."""

from __future__ import annotations

import pytest

from mirl.engines import registry
from mirl.engines.embedded import EmbeddedLM
from mirl.engines.registry import policy_engine, vllm_available
from mirl.llm.ledger import read_ledger
from tests.engines.tiny import tiny_checkpoint

PROMPT = [{"role": "user", "content": "print the working directory"}]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny-policy"))


@pytest.mark.slow
def test_a_checkpoint_on_a_cpu_gets_the_batched_cpu_engine(checkpoint):
    engine = policy_engine(checkpoint)  # auto, no GPU here
    assert isinstance(engine, EmbeddedLM)
    a = engine.generate(PROMPT, sample_indices=[0, 1, 2], max_tokens=6, temperature=1.0, seed=3)
    b = engine.generate(PROMPT, sample_indices=[0, 1, 2], max_tokens=6, temperature=1.0, seed=3)
    assert [s.text for s in a.samples] == [s.text for s in b.samples]
    assert len({s.text for s in a.samples}) > 1  # rows draw from their own generators
    assert a.prompt_tokens > 5 and all(s.output_tokens == 6 or s.finish_reason == "stop" for s in a.samples)
    pair = engine.generate(PROMPT, sample_indices=[4, 5], max_tokens=6, temperature=1.0, seed=3)
    alone = engine.generate(PROMPT, sample_indices=[5], max_tokens=6, temperature=1.0, seed=3)
    assert alone.samples[0].text == pair.samples[1].text  # (seed, index) reproduces outside its batch


@pytest.mark.slow
def test_served_engine_goes_through_the_client(checkpoint, make_client):
    engine = policy_engine(checkpoint, backend="embedded")
    name = registry.serve("tiny-policy-test", engine)
    client = make_client({"policy": name})
    client.config.policy.max_tokens = 5
    outs = client.complete("policy", PROMPT, n=3)
    assert len(outs) == 3 and all(c.output_tokens <= 5 for c in outs)
    row = read_ledger(client.run_dir).iloc[0]
    assert row["n"] == 3 and row["output_tokens"] == sum(c.output_tokens for c in outs)


def test_bad_backend_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="backend must be"):
        policy_engine(tmp_path, backend="tensorrt")


@pytest.mark.slow
@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (pip install 'mirl[gpu]'); "
                                                  "the paged engine covers the same interface (tests/engines/test_paged.py)")
def test_vllm_engine_on_gpu(checkpoint):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a GPU")
    engine = policy_engine(checkpoint, backend="vllm", gpu_memory_utilization=0.3, max_model_len=512)
    a = engine.generate(PROMPT, sample_indices=[0, 1], max_tokens=6, temperature=1.0, seed=1)
    b = engine.generate(PROMPT, sample_indices=[1], max_tokens=6, temperature=1.0, seed=1)
    assert b.samples[0].text == a.samples[1].text  # (seed, index) reproduces outside its batch
    assert a.prompt_tokens > 5


# --- the vLLM engine's request/response mapping, against a stand-in for vllm.LLM ------------------
# This checks our side only (what we send, how we read vLLM's output shapes); it cannot show that
# vLLM itself samples or reports logprobs as documented. The GPU test above does, where vLLM runs.


class StandInParams:
    def __init__(self, **kw):
        self.kw = kw


class StandInLLM:
    """The surface of `vllm.LLM` the engine touches; outputs shaped like vLLM's RequestOutput
    (per position a dict token id -> Logprob with the sampled token among other top tokens)."""

    def __init__(self, tokenizer, reset_ok=True):
        from types import SimpleNamespace

        self.tokenizer, self.reset_ok, self.calls, self.loaded, self.resets = tokenizer, reset_ok, [], [], 0
        self.model = SimpleNamespace(load_weights=lambda items: self.loaded.append(list(items)))

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, sampling_params, use_tqdm):
        from types import SimpleNamespace as NS

        self.calls.append((prompts, [p.kw for p in sampling_params]))
        outs = []
        for k, _ in enumerate(prompts):
            toks = [10 + k, 20 + k, self.tokenizer.eos_token_id] if k % 2 == 0 else [30 + k, 40 + k]
            pos = [{t: NS(logprob=-0.25 * (j + 1)), t + 1: NS(logprob=-0.01)} for j, t in enumerate(toks)]
            outs.append(NS(outputs=[NS(token_ids=toks, logprobs=pos, finish_reason="stop" if k % 2 == 0 else "length")],
                           prompt_token_ids=prompts[k]["prompt_token_ids"], num_cached_tokens=16))
        return outs

    def apply_model(self, fn):
        return [fn(self.model)]

    def reset_prefix_cache(self):
        self.resets += 1
        return self.reset_ok


@pytest.fixture
def stand_in(checkpoint):
    from transformers import AutoTokenizer

    from mirl.engines.vllm_engine import VLLMEngine

    def make(**kw):
        engine = VLLMEngine.__new__(VLLMEngine)
        engine._attach(StandInLLM(AutoTokenizer.from_pretrained(str(checkpoint)), **kw), StandInParams, "stand-in")
        return engine

    return make


def test_vllm_engine_sends_token_ids_and_reads_the_sampled_logprobs(stand_in):
    from mirl.engines.generator import Generator, row_seed

    engine = stand_in()
    assert isinstance(engine, Generator) and engine.tokenizer.eos_token_id in engine.end_ids
    gen = engine.generate_tokens([1, 2, 3, 4], [3, 4], max_tokens=7, temperature=0.6, seed=9)
    prompts, params = engine.llm.calls[0]
    assert prompts == [{"prompt_token_ids": [1, 2, 3, 4]}] * 2
    assert [p["seed"] for p in params] == [row_seed(9, 3), row_seed(9, 4)]
    assert all(p["logprobs"] == 0 and p["n"] == 1 and p["temperature"] == 0.6 and p["max_tokens"] == 7
               for p in params)
    eos = engine.tokenizer.eos_token_id
    assert [s.ids for s in gen.samples] == [[10, 20, eos], [31, 41]]
    assert [s.logprobs for s in gen.samples] == [[-0.25, -0.5, -0.75], [-0.25, -0.5]]  # the sampled token's
    assert [s.finish_reason for s in gen.samples] == ["stop", "length"]
    assert gen.prompt_tokens == 4 and gen.cached_tokens == 16


def test_vllm_update_weights_loads_them_and_resets_the_prefix_cache(stand_in):
    import torch

    engine = stand_in()
    weights = {"model.embed_tokens.weight": torch.zeros(2, 2)}
    engine.update_weights(weights)
    assert [[name for name, _ in items] for items in engine.llm.loaded] == [["model.embed_tokens.weight"]]
    assert engine.llm.resets == 1
    with pytest.raises(RuntimeError, match="prefix cache"):
        stand_in(reset_ok=False).update_weights(weights)
