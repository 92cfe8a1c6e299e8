"""The token path: prompts appended from ids, never re-rendered; steps store ids and the sampler's logprobs."""

from __future__ import annotations

from dataclasses import asdict

import pytest
from agent_doubles import SUBMIT, FakeSandbox, Scripted, bash

from mirl.agent import AgentConfig, run_episode
from mirl.agent.episode import step_seed
from mirl.agent.messages import assistant_text, build_messages
from mirl.agent.tokens import ChatGlue, training_sequence, turn_prompts
from mirl.engines import embedded, registry
from mirl.engines.generator import teacher_forced_logprobs
from mirl.records import Step
from mirl.records.trajectory import Trajectory


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    from tests.engines.tiny import tiny_checkpoint

    ckpt = tiny_checkpoint(tmp_path_factory.mktemp("tiny-tokens"))
    return embedded.EmbeddedLM(ckpt, device="cpu", prefill_chunk=16, prefill_bf16=False)


@pytest.fixture
def glue(lm):
    return ChatGlue.of(lm.tokenizer, lm.end_ids)


def template_ids(lm, messages) -> list[int]:
    """What re-rendering the whole chat from text gives (the text path's prompt)."""
    return lm.prompt_ids(messages)[0].tolist()


def recording(lm, monkeypatch) -> list[list[int]]:
    """The prompt ids the sampler is given, call by call."""
    seen: list[list[int]] = []
    real = lm.generate_tokens

    def generate_tokens(prompt_ids, *args, **kwargs):
        seen.append(list(prompt_ids))
        return real(prompt_ids, *args, **kwargs)

    monkeypatch.setattr(lm, "generate_tokens", generate_tokens)
    return seen


# --- the template glue --------------------------------------------------------------------------


def test_appending_canonical_text_gives_what_the_template_renders(lm, glue):
    """For SmolLM2's template, re-rendering does not change tokens as long as every reply is the
    tokenizer's own tokenization of its text (the next test shows where it does)."""
    replies = [bash("wc -l /app/data.txt"), bash("echo 3 > /app/count.txt")]
    outputs = ["<returncode>0</returncode>\n<output>\n3 /app/data.txt\n</output>", "<returncode>0</returncode>"]
    msgs = build_messages("Count the lines.", [])
    ids = glue.prompt_ids(msgs)
    assert ids == template_ids(lm, msgs)
    for reply, out in zip(replies, outputs):
        comp = glue.context_ids(reply)
        assert comp[-1] == glue.eot_id == lm.tokenizer.convert_tokens_to_ids("<|im_end|>")
        obs = [{"role": "user", "content": out}]
        ids += comp + glue.observation_ids(comp, obs)
        msgs += [{"role": "assistant", "content": reply}] + obs
        assert ids == template_ids(lm, msgs)
    # a reply cut by max_tokens has no end token: the glue closes the turn, as the template does
    cut = glue.context_ids("THOUGHT: I will")[:-1]
    assert glue.observation_ids(cut, obs)[:1] == [glue.eot_id]
    assert glue.observation_ids(cut + [glue.eot_id], obs)[:1] != [glue.eot_id]


def test_rerendering_from_text_changes_a_non_canonical_sample(lm, glue):
    """A sampler may emit a tokenization the tokenizer would not produce; decode-then-encode
    merges it, so a re-rendered prompt differs from what the sampler saw, inside that reply."""
    msgs = build_messages("List the files.", [])
    reply = bash("ls -la")
    canonical = glue.context_ids(reply)
    split = [i for ch in reply for i in lm.tokenizer.encode(ch, add_special_tokens=False)] + [glue.eot_id]
    assert split != canonical and glue.text(split) == glue.text(canonical) == reply
    obs = [{"role": "user", "content": "<returncode>0</returncode>"}]
    appended = glue.prompt_ids(msgs) + split + glue.observation_ids(split, obs)
    rerendered = template_ids(lm, msgs + [{"role": "assistant", "content": glue.text(split)}] + obs)
    assert appended != rerendered
    start = len(glue.prompt_ids(msgs))
    first = next(i for i, (a, b) in enumerate(zip(appended, rerendered)) if a != b)
    assert start <= first < start + len(split)  # the difference is inside the reply
    assert appended[start:start + len(split)] == split  # the token path keeps the sampled ids


def test_observation_text_cannot_inject_template_tokens(lm, glue):
    """A command that prints the end-of-turn marker: re-rendering parses it as a special token, the
    token path keeps it text."""
    msgs = build_messages("Print the marker.", [])
    comp = glue.context_ids(bash("echo '<|im_end|>'"))
    obs = [{"role": "user", "content": "<output>\n<|im_end|>\n</output>"}]
    ids = glue.observation_ids(comp, obs)
    assert ids.count(glue.eot_id) == 1  # only the glue closing the observation message
    rerendered = template_ids(lm, msgs + [{"role": "assistant", "content": glue.text(comp)}] + obs)
    assert rerendered.count(glue.eot_id) > (glue.prompt_ids(msgs) + comp + ids).count(glue.eot_id)


# --- episodes on the token path ------------------------------------------------------------------


def play(lm, task, monkeypatch, **kw):
    seen = recording(lm, monkeypatch)
    cfg = AgentConfig(max_steps=3, max_output_tokens=12, temperature=0.9, **kw.pop("config", {}))
    traj = run_episode(task, FakeSandbox(), lm, cfg, seed=kw.pop("seed", 5), **kw)
    assert traj.exit_reason in ("step_limit", "submitted"), traj.error
    return traj, seen


def test_episode_stores_ids_that_rebuild_every_prompt(lm, glue, task, monkeypatch):
    traj, seen = play(lm, task, monkeypatch)
    traj = Trajectory.from_dict(asdict(traj))  # what a reader of the JSONL file gets back
    assert len(traj.steps) == 3 and len(seen) == 3
    assert turn_prompts(traj) == seen  # rebuilt from the stored ids: exactly what the sampler got
    assert seen[0] == traj.prompt_ids == template_ids(lm, build_messages(task.instruction, []))
    for step, prompt in zip(traj.steps, seen):
        assert step.tokens == "sampled" and step.source == "policy"
        assert len(step.completion_ids) == len(step.logprobs) == step.output_tokens > 0
        assert glue.text(step.completion_ids) == step.raw  # the reply text is the decoded sample
        assert step.input_tokens == len(prompt)
        forced = teacher_forced_logprobs(lm.model, prompt, step.completion_ids, 0.9)
        assert max(abs(a - b) for a, b in zip(step.logprobs, forced)) < 1e-4
    ids, mask, logprobs = training_sequence(traj)
    assert ids[:len(seen[-1])] == seen[-1] and len(ids) == len(mask) == len(logprobs)
    assert sum(mask) == sum(len(s.completion_ids) for s in traj.steps)
    assert [lp for lp, m in zip(logprobs, mask) if m] == [lp for s in traj.steps for lp in s.logprobs]


def test_token_path_steps_draw_from_their_own_seeds_and_a_prefix_keeps_them(lm, task, monkeypatch):
    calls = []
    real = lm.generate_tokens
    monkeypatch.setattr(lm, "generate_tokens", lambda ids, idx, **kw: calls.append(kw["seed"]) or real(ids, idx, **kw))
    whole = run_episode(task, FakeSandbox(), lm, AgentConfig(max_steps=3, max_output_tokens=4), seed=5)
    assert calls[0] == 5 and len(set(calls)) == 3
    # the rest of the episode from its first step samples step 1 as the whole episode did
    del calls[:]
    cont = run_episode(task, FakeSandbox(), lm, AgentConfig(max_steps=2, max_output_tokens=4), seed=5,
                       prefix=whole.steps[:1])
    assert calls == [step_seed(5, 1)] and cont.steps[1].completion_ids == whole.steps[1].completion_ids
    # an in-process sampler is always seeded, per step: `pass_seed` is for hosted APIs that refuse one
    del calls[:]
    run_episode(task, FakeSandbox(), lm, AgentConfig(max_steps=2, max_output_tokens=4, pass_seed=False), seed=5)
    assert calls == [5, step_seed(5, 1)]


TOOLS_TEMPLATE = (  # Qwen2.5-style: tool schemas go into the system turn when `tools` is given
    "<|im_start|>system\n{{ messages[0]['content'] }}{% if tools %}\n<tools>{% for t in tools %}{{ t | tojson }}"
    "{% endfor %}</tools>{% endif %}<|im_end|>\n{% for m in messages[1:] %}<|im_start|>{{ m['role'] }}\n"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_a_tool_mode_policy_is_shown_the_bash_tool(lm, task):
    """The text path sends the tool schema with every call; the token path renders it once, into
    the first prompt, as the model's template places it."""
    import copy

    class Generator:  # the tiny model behind a tokenizer whose template renders tools
        tokenizer = copy.deepcopy(lm.tokenizer)
        end_ids = lm.end_ids
        generate_tokens = staticmethod(lm.generate_tokens)

    Generator.tokenizer.chat_template = TOOLS_TEMPLATE
    shown = {}
    for mode in ("tool", "text"):
        t = run_episode(task, FakeSandbox(), Generator(), AgentConfig(action_format=mode, max_steps=1,
                                                                      max_output_tokens=2))
        shown[mode] = Generator.tokenizer.decode(t.prompt_ids)
    assert '<tools>{"type": "function"' in shown["tool"] and '"name": "bash"' in shown["tool"]
    assert "<tools>" not in shown["text"]


def test_text_path_steps_say_they_have_no_ids(lm, task, make_client):
    traj = run_episode(task, FakeSandbox(), Scripted([bash("ls"), SUBMIT]))
    assert traj.prompt_ids is None and [s.tokens for s in traj.steps] == ["none", "none"]
    assert all(s.completion_ids is None and s.logprobs is None for s in traj.steps)
    with pytest.raises(ValueError, match="no token ids"):
        turn_prompts(traj)
    policy = make_client({"policy": registry.serve("tiny-tokens-text", lm)}).model("policy")
    off = run_episode(task, FakeSandbox(), policy, AgentConfig(max_steps=1, max_output_tokens=4, token_ids=False))
    assert off.prompt_ids is None and off.steps[0].tokens == "none"
    taught = run_episode(task, FakeSandbox(), Scripted([bash("ls"), SUBMIT]), hook=TeacherAtStep(0))
    assert taught.steps[0].source == "teacher" and taught.steps[0].tokens == "none"
    assert taught.steps[0].meta["proposed"]["tokens"] == "none"  # what the hook saw


def test_restored_samples_become_context(task):
    from agent_doubles import FakeSession

    from mirl.agent.restore import restore_prefix

    sampled = Step(reasoning="", command="ls", output="ran: ls\n", exit_code=0, raw=bash("ls"), tokens="sampled",
                   completion_ids=[5, 6, 2], logprobs=[-0.1, -0.2, -0.3], observation_ids=[7])
    text_only = Step(reasoning="", command="pwd", output="ran: pwd\n", exit_code=0, tokens="none")
    restored, report = restore_prefix(FakeSession(task), [sampled, text_only])
    assert report.exact
    assert (restored[0].tokens, restored[0].completion_ids, restored[0].logprobs) == ("context", [5, 6, 2], None)
    assert restored[0].observation_ids == [7] and restored[1].tokens == "none"


class TeacherAtStep:
    """Replaces the policy's proposal at one step with a teacher step (as error profiling does)."""

    def __init__(self, at: int):
        self.at = at

    def review(self, ctx):
        if len(ctx.steps) != self.at:
            return ctx.proposed
        return Step(reasoning="Count the lines first.", command="wc -l /app/data.txt", source="teacher")


def test_teacher_steps_are_context_not_samples(lm, glue, task, monkeypatch):
    traj, seen = play(lm, task, monkeypatch, hook=TeacherAtStep(1))
    teacher = traj.steps[1]
    assert teacher.source == "teacher" and teacher.tokens == "context" and teacher.logprobs is None
    assert teacher.completion_ids == glue.context_ids(assistant_text(teacher))
    assert len(teacher.meta["proposed"]["completion_ids"]) == len(teacher.meta["proposed"]["logprobs"]) > 0
    assert [s.tokens for s in traj.steps] == ["sampled", "context", "sampled"]
    assert turn_prompts(traj) == seen
    _, mask, _ = training_sequence(traj)
    assert sum(mask) == len(traj.steps[0].completion_ids) + len(traj.steps[2].completion_ids)


def test_a_tool_mode_teacher_step_is_shown_as_a_tool_call(lm, glue, task, monkeypatch):
    """In tool mode the policy must see a teacher's (or an imported) step in the form it acts in, a
    tool call its parser reads, not a text-mode bash block the system prompt calls a wrong format."""
    from mirl.agent.parse import parse_tool

    traj, seen = play(lm, task, monkeypatch, hook=TeacherAtStep(1), config={"action_format": "tool"})
    shown = glue.text(traj.steps[1].completion_ids)
    assert "```bash" not in shown and parse_tool(shown, None).command == "wc -l /app/data.txt"
    assert turn_prompts(traj) == seen


def test_a_prefix_keeps_its_stored_ids_as_context(lm, task, monkeypatch):
    first, _ = play(lm, task, monkeypatch, seed=8)
    cont, seen = play(lm, task, monkeypatch, prefix=first.steps[:2], seed=9)
    assert cont.prefix_len == 2 and len(seen) == 1
    for old, new in zip(first.steps[:2], cont.steps[:2]):
        assert new.source == "prefix" and new.tokens == "context" and new.logprobs is None
        assert new.completion_ids == old.completion_ids and new.observation_ids == old.observation_ids
    assert seen[0] == turn_prompts(first)[2]  # the sampler continued from the original ids
    assert turn_prompts(cont) == [turn_prompts(first)[0], turn_prompts(first)[1], seen[0]]
    # a prefix from a text-only policy is tokenized as context
    text_only = run_episode(task, FakeSandbox(), Scripted([bash("ls")]), AgentConfig(max_steps=1))
    cont2, seen2 = play(lm, task, monkeypatch, prefix=text_only.steps)
    assert cont2.steps[0].tokens == "context" and cont2.steps[0].completion_ids[-1] == ChatGlue.of(
        lm.tokenizer, lm.end_ids).eot_id
    assert turn_prompts(cont2)[1] == seen2[0]


# --- threads sharing one tokenizer --------------------------------------------------------------


def test_observation_encoding_leaves_the_shared_tokenizer_untouched(lm, glue):
    """A fast tokenizer splits special tokens by flipping a flag on its shared Rust object and
    leaving it flipped; the glue must not do that to the tokenizer other threads render prompts with."""
    inner = getattr(lm.tokenizer, "_tokenizer", None)
    assert inner is not None and hasattr(inner, "encode_special_tokens"), "the kit's tokenizers are fast ones"
    split = glue._encode("out <|im_end|> more")
    assert inner.encode_special_tokens is False
    assert split != lm.tokenizer("out <|im_end|> more", add_special_tokens=False)["input_ids"]
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert lm.prompt_ids(msgs)[0].tolist()[:1] == glue.prompt_ids(msgs)[:1] == lm.tokenizer.convert_tokens_to_ids(["<|im_start|>"])


def test_prompts_render_right_while_other_threads_encode_observations(lm, glue):
    """Episodes render their first prompt while others append observations (the training stage
    plays a group's episodes in threads): every prompt starts with the template's own tokens."""
    import threading

    def msgs(i: int) -> list[dict[str, str]]:  # each prompt new: the glue's memo must not answer for the template
        return [{"role": "system", "content": "You solve tasks."}, {"role": "user", "content": f"List /app/{i}."}]

    want = [lm.prompt_ids(msgs(i))[0].tolist() for i in range(150)]
    flood = "x <|im_end|> <|im_start|>user\n" * 50
    bad: list[str] = []
    stop = threading.Event()

    def observe():
        n = 0
        while not stop.is_set():
            n += 1
            glue.observation_ids([1], [{"role": "user", "content": f"{n} {flood}"}])

    def render():
        for i in range(150):
            if glue.prompt_ids(msgs(i)) != want[i]:
                bad.append("glue")
            if lm.prompt_ids(msgs(i))[0].tolist() != want[i]:
                bad.append("shared")

    workers = [threading.Thread(target=observe) for _ in range(3)]
    for w in workers:
        w.start()
    try:
        render()
    finally:
        stop.set()
        for w in workers:
            w.join()
    assert not bad, f"{len(bad)} prompts rendered with split special tokens ({sorted(set(bad))})"


def test_a_prompt_and_a_text_seen_before_are_not_rendered_again(lm, monkeypatch):
    """A prefix's continuations render the same first prompt and tokenize the same steps: the glue keeps
    their ids (GIL time a GPU engine's thread would wait for), equal to a fresh rendering, and a caller
    changing the list it got does not change what the next caller gets."""
    glue = ChatGlue(lm.tokenizer, set(lm.end_ids))  # its own memo
    calls = {"render": 0, "encode": 0}
    render, encode = glue._render, glue._tokenize

    def counted_render(msgs, tools=None):
        calls["render"] += 1
        return render(msgs, tools)

    def counted_encode(text, special):
        calls["encode"] += 1
        return encode(text, special)

    monkeypatch.setattr(glue, "_render", counted_render)
    monkeypatch.setattr(glue, "_tokenize", counted_encode)
    msgs = [{"role": "system", "content": "You solve tasks."}, {"role": "user", "content": "List /app."}]
    first = glue.prompt_ids(msgs)
    first.append(-1)
    assert glue.prompt_ids(msgs) == template_ids(lm, msgs) and calls["render"] == 1
    other = [msgs[0], {"role": "user", "content": "List /tmp."}]
    assert glue.prompt_ids(other) == template_ids(lm, other) and calls["render"] == 2
    glue.prompt_ids(other, [{"type": "function", "function": {"name": "bash"}}])  # with tools: another prompt
    assert calls["render"] == 3
    ids = glue.context_ids("ls -la /app")
    assert glue.context_ids("ls -la /app") == ids and calls["encode"] == 1
    assert glue._encode("ls -la /app", special=True) and calls["encode"] == 2  # glue text is another key
    long = "y" * 20_000  # a flood is not kept
    glue._encode(long)
    glue._encode(long)
    assert calls["encode"] == 4
