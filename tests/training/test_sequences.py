"""Training examples: loss only on what the policy sampled after the prefix, from the stored ids."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))  # agent_doubles, as the token tests use

from agent_doubles import SUBMIT, FakeSandbox, Scripted, bash, make_task  # noqa: E402

from mirl.agent import AgentConfig, run_episode  # noqa: E402
from mirl.agent.tokens import turn_prompts  # noqa: E402
from mirl.records.trajectory import Trajectory  # noqa: E402
from mirl.training.sequences import NoTokenIds, training_example  # noqa: E402
from tests.agent.test_tokens import TeacherAtStep, recording  # noqa: E402
from tests.engines.tiny import tiny_checkpoint  # noqa: E402

PREFIX = 2
TEACHER = 3  # index of the teacher step, after the prefix


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """The token tests' tiny model, with room for a five-step episode (its weights do not care)."""
    import json

    from mirl.engines import embedded

    ckpt = tiny_checkpoint(tmp_path_factory.mktemp("tiny-sequences"))
    cfg = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 2048}))
    return embedded.EmbeddedLM(ckpt, device="cpu", prefill_chunk=16, prefill_bf16=False)


@pytest.fixture
def rollout(lm, tmp_path, monkeypatch):
    """A real token-path episode: 2 prefix steps (short, to fit the tiny model's context), a policy step, a teacher step, a policy step.
    Returns it as a reader of the JSONL file gets it, with the prompts the sampler was given."""
    task = make_task(tmp_path)
    first = run_episode(task, FakeSandbox(), Scripted([bash("ls"), bash("pwd")]), AgentConfig(max_steps=2))
    seen = recording(lm, monkeypatch)
    cfg = AgentConfig(max_steps=5, max_output_tokens=12, temperature=0.9)
    traj = run_episode(task, FakeSandbox(), lm, cfg, seed=9, prefix=first.steps[:PREFIX], hook=TeacherAtStep(TEACHER))
    assert traj.exit_reason == "step_limit", traj.error
    traj = Trajectory.from_dict(asdict(traj))
    assert [s.source for s in traj.steps] == ["prefix", "prefix", "policy", "teacher", "policy"]
    assert traj.prefix_len == PREFIX and len(seen) == 3  # the sampler ran at steps 2, 3 (replaced), 4
    return traj, seen


def test_the_mask_covers_exactly_the_policy_tokens_sampled_after_the_prefix(rollout):
    traj, seen = rollout
    ids, mask, logprobs = training_example(traj)
    assert len(ids) == len(mask) == len(logprobs)
    # independently: a sampled step's completion starts where the prompt the sampler got for it ends
    expected = set()
    for step_index, prompt in zip((2, 4), (seen[0], seen[2])):
        comp = traj.steps[step_index].completion_ids
        assert ids[:len(prompt)] == prompt and ids[len(prompt):len(prompt) + len(comp)] == comp
        expected |= set(range(len(prompt), len(prompt) + len(comp)))
    assert {i for i, m in enumerate(mask) if m} == expected
    assert [lp for lp, m in zip(logprobs, mask) if m] == traj.steps[2].logprobs + traj.steps[4].logprobs
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if not m)
    # nothing else: prompt, prefix, teacher, observations and glue all carry 0
    prompts = turn_prompts(traj)
    assert sum(mask[:len(prompts[PREFIX])]) == 0  # the whole prompt of the first own step: task + prefix
    teacher = range(len(prompts[TEACHER]), len(prompts[TEACHER]) + len(traj.steps[TEACHER].completion_ids))
    assert not any(mask[i] for i in teacher)


def test_a_prefix_step_still_marked_sampled_is_not_trained_on(rollout):
    """A prefix step that kept its sample marks (say, from an older writer) is still the prefix's."""
    traj, seen = rollout
    old = traj.steps[1]
    old.tokens, old.source, old.logprobs = "sampled", "policy", [-0.5] * len(old.completion_ids)
    teacher = traj.steps[TEACHER]  # nor is a teacher's sample: its logprobs are not the policy's
    teacher.tokens, teacher.logprobs = "sampled", [-0.25] * len(teacher.completion_ids)
    ids, mask, logprobs = training_example(traj)
    prompts = turn_prompts(traj)
    for i in (1, TEACHER):
        at = range(len(prompts[i]), len(prompts[i]) + len(traj.steps[i].completion_ids))
        assert [mask[k] for k in at] == [0] * len(at) and [logprobs[k] for k in at] == [0.0] * len(at)
    assert sum(mask) == len(traj.steps[2].completion_ids) + len(traj.steps[4].completion_ids)
    start = len(prompts[1])
    # with a one-step prefix the same step is the policy's own and is trained on
    _, mask1, _ = training_example(traj, prefix_steps=1)
    assert sum(mask1[start:start + len(old.completion_ids)]) == len(old.completion_ids)


def test_a_step_without_ids_cannot_be_trained_on(rollout, tmp_path):
    traj, _ = rollout
    traj.steps[TEACHER].observation_ids = None
    with pytest.raises(NoTokenIds, match=f"step {TEACHER} .*no token ids"):
        training_example(traj)
    text_only = run_episode(make_task(tmp_path), FakeSandbox(), Scripted([bash("ls"), SUBMIT]))
    with pytest.raises(NoTokenIds, match="text only"):
        training_example(text_only)


def test_sampled_marks_without_matching_logprobs_are_an_error(rollout):
    traj, _ = rollout
    traj.steps[4].logprobs = traj.steps[4].logprobs[:-1]
    with pytest.raises(NoTokenIds, match="step 4 is marked sampled"):
        training_example(traj)
