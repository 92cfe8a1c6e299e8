"""PivotRL groups: pivots of reference trajectories, actions sampled from the stored prompt, rewarded
by step equivalence, and one-step training examples."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))  # agent_doubles, as the token tests use

from agent_doubles import SUBMIT, FakeSandbox, bash, make_task  # noqa: E402

from mirl.agent import AgentConfig, run_episode  # noqa: E402
from mirl.engines.generator import TokenGeneration, TokenSample  # noqa: E402
from mirl.llm.errors import LLMError  # noqa: E402
from mirl.records.trajectory import Trajectory  # noqa: E402
from mirl.roles.step_judge import DifflibStepJudge  # noqa: E402
from mirl.training.advantages import is_dead  # noqa: E402
from mirl.training.pivot import Pivot, one_step_example, pivot_candidates, pivot_group, pivot_prompt  # noqa: E402

WRITE = "echo hi > /app/hello.txt"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from tests.engines.smollm2 import require_smollm2

    gguf = require_smollm2()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


class ScriptedGenerator:
    """A deterministic token-level policy on the real SmolLM2 tokenizer: `reply(call, index)` gives
    each sample's text; its ids are the text's tokens plus <|im_end|>, its logprobs made up."""

    name = "scripted-tokens"

    def __init__(self, tokenizer, reply):
        self.tokenizer, self.reply = tokenizer, reply
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.end_ids = {tokenizer.eos_token_id, self.im_end}
        self.calls: list[tuple[list[int], list[int], dict]] = []
        self.samples: list[TokenSample] = []

    def generate_tokens(self, prompt_ids, sample_indices, **sampling):
        self.calls.append((list(prompt_ids), list(sample_indices), dict(sampling)))
        out = []
        for i in sample_indices:
            ids = self.tokenizer(self.reply(len(self.calls) - 1, i), add_special_tokens=False)["input_ids"] + [self.im_end]
            out.append(TokenSample(ids=ids, logprobs=[-0.01 * (i + 1) * (k + 1) for k in range(len(ids))],
                                   finish_reason="stop"))
        self.samples += out
        return TokenGeneration(samples=out, prompt_tokens=len(prompt_ids))

    def update_weights(self, weights):
        raise NotImplementedError


@pytest.fixture
def reference(tokenizer, tmp_path):
    """A passed token-path episode: ls, a reply without a command, the write, submit; with the
    prompts its sampler was given."""
    script = [bash("ls"), "I will just think.", bash(WRITE), SUBMIT]
    gen = ScriptedGenerator(tokenizer, lambda call, i: script[call])
    traj = run_episode(make_task(tmp_path), FakeSandbox(), gen, AgentConfig(max_steps=6), seed=3)
    assert traj.exit_reason == "submitted" and traj.reward == 1.0, traj.error
    traj = Trajectory.from_dict(asdict(traj))
    assert [s.command for s in traj.steps] == ["ls", None, WRITE, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    return traj, [c[0] for c in gen.calls]


def test_pivots_are_the_command_steps_of_passed_trajectories_with_token_ids(reference):
    traj, _ = reference
    failed = Trajectory.from_dict(asdict(traj) | {"seed": 4, "reward": 0.0})
    partial = Trajectory.from_dict(asdict(traj) | {"seed": 5, "reward": 0.5})
    broken = Trajectory.from_dict(asdict(traj) | {"seed": 6, "verifier_error": "test.sh crashed"})
    text_only = Trajectory.from_dict(asdict(traj) | {"seed": 7, "prompt_ids": None})
    pivots = pivot_candidates([traj, failed, partial, broken, text_only])
    assert pivots == [Pivot("t1", 3, 0), Pivot("t1", 3, 2), Pivot("t1", 3, 3)]  # step 1 has no command
    assert pivot_candidates([partial], min_reward=0.5) == [Pivot("t1", 5, 0), Pivot("t1", 5, 2), Pivot("t1", 5, 3)]


def test_the_pivot_prompt_is_what_the_reference_sampler_was_given(reference):
    traj, seen = reference
    assert [pivot_prompt(traj, k) for k in range(4)] == seen
    with pytest.raises(IndexError, match="no step 4"):
        pivot_prompt(traj, 4)


def test_actions_matching_the_reference_step_earn_one(tokenizer, reference):
    traj, seen = reference
    replies = [bash(WRITE), bash("echo  hi >   /app/hello.txt"), bash(WRITE + "\n"), bash("echo hi > /app/hello.tx"),
               bash("echo hello > /app/hello.txt"), bash("ls"), "no command at all", bash(WRITE) + bash("pwd")]
    expected = [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]  # "...hello.tx" is 2*23/47 = 0.979; two blocks: no command
    gen = ScriptedGenerator(tokenizer, lambda call, i: replies[i])
    group = pivot_group(Pivot("t1", 3, 2), traj, gen, DifflibStepJudge(), n=8, sampling={"temperature": 0.7, "seed": 11})
    assert group.rewards == tuple(expected) and group.valid == (True,) * 8 and group.prefix_id == "t1#3@2"
    assert not is_dead(group)
    [(prompt, indices, sampling)] = gen.calls
    assert prompt == seen[2] and indices == list(range(8)) and sampling == {"temperature": 0.7, "seed": 11}
    for action, sample in zip(group.rollouts, gen.samples):
        prompt_ids, completion_ids, logprobs = action
        assert prompt_ids == seen[2] and completion_ids == sample.ids and logprobs == sample.logprobs


@pytest.mark.parametrize("reply,reward", [(bash(WRITE), 1.0), (bash("ls"), 0.0)])
def test_groups_whose_actions_all_agree_are_dead(tokenizer, reference, reply, reward):
    traj, _ = reference
    group = pivot_group(Pivot("t1", 3, 2), traj, ScriptedGenerator(tokenizer, lambda call, i: reply),
                        DifflibStepJudge(), n=8)
    assert group.rewards == (reward,) * 8 and is_dead(group)


def test_actions_are_parsed_in_the_trajectorys_action_format(tokenizer, reference):
    traj, _ = reference
    call = '<tool_call>\n{"name": "bash", "arguments": {"command": "%s"}}\n</tool_call>' % WRITE
    gen = ScriptedGenerator(tokenizer, lambda c, i: call if i == 0 else bash(WRITE))
    assert pivot_group(Pivot("t1", 3, 2), traj, gen, DifflibStepJudge(), n=2).rewards == (0.0, 1.0)
    traj.meta["action_format"] = "tool"
    assert pivot_group(Pivot("t1", 3, 2), traj, gen, DifflibStepJudge(), n=2).rewards == (1.0, 0.0)


def test_an_action_the_judge_could_not_rate_is_invalid(tokenizer, reference):
    traj, _ = reference

    class FlakyJudge(DifflibStepJudge):
        def same(self, context, ref, action):
            if action.command == "echo flaky":
                raise LLMError("invalid_json", "no answer tag after 3 asks", role="step_judge")
            return super().same(context, ref, action)

    replies = [bash(WRITE), bash("echo flaky"), bash("pwd")]
    group = pivot_group(Pivot("t1", 3, 2), traj, ScriptedGenerator(tokenizer, lambda c, i: replies[i]), FlakyJudge(), n=3)
    assert group.rewards == (1.0, 0.0, 0.0) and group.valid == (True, False, True) and not is_dead(group)


def test_the_judge_sees_the_steps_before_the_pivot(tokenizer, reference):
    traj, _ = reference
    seen = []

    class Recording(DifflibStepJudge):
        def same(self, context, ref, action):
            seen.append(([s.command for s in context], ref.command, action.command))
            return super().same(context, ref, action)

    pivot_group(Pivot("t1", 3, 2), traj, ScriptedGenerator(tokenizer, lambda c, i: bash("pwd")), Recording(), n=1)
    assert seen == [(["ls", None], WRITE, "pwd")]


def test_a_pivot_of_another_trajectory_is_refused(tokenizer, reference):
    traj, _ = reference
    with pytest.raises(ValueError, match="does not belong"):
        pivot_group(Pivot("t1", 9, 2), traj, ScriptedGenerator(tokenizer, lambda c, i: ""), DifflibStepJudge())


def test_one_step_examples_train_exactly_on_the_completion(tokenizer, reference):
    traj, seen = reference
    group = pivot_group(Pivot("t1", 3, 2), traj, ScriptedGenerator(tokenizer, lambda c, i: bash(WRITE)),
                        DifflibStepJudge(), n=2)
    for action in group.rollouts:
        ids, mask, logprobs = one_step_example(*action)
        p, c = len(seen[2]), len(action.completion_ids)
        assert ids == seen[2] + action.completion_ids and len(mask) == len(logprobs) == p + c
        assert mask == [0] * p + [1] * c
        assert logprobs[p:] == action.logprobs and logprobs[:p] == [0.0] * p
    assert one_step_example([5, 6], [7], [-0.5]) == ([5, 6, 7], [0, 0, 1], [0.0, 0.0, -0.5])
    with pytest.raises(ValueError, match="2 logprobs for 1 completion ids"):
        one_step_example([5], [7], [-0.1, -0.2])
    with pytest.raises(ValueError, match="nothing to train on"):
        one_step_example([5], [], [])


@pytest.mark.slow
def test_a_pivot_group_from_the_embedded_smollm2(tokenizer, reference):
    """The real engine samples at the stored prompt: one action per sample index, ids and logprobs
    paired, and each reward the difflib verdict on the sample's own decoded command."""
    import difflib

    from mirl.agent.parse import parse_text
    from mirl.engines import registry

    traj, seen = reference
    engine = registry.get("smollm2")
    group = pivot_group(Pivot("t1", 3, 2), traj, engine, DifflibStepJudge(), n=4,
                        sampling={"max_tokens": 48, "temperature": 1.0, "seed": 5})
    assert len(group.rollouts) == 4 and group.valid == (True,) * 4
    ends = {tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id}
    for action, reward in zip(group.rollouts, group.rewards):
        assert action.prompt_ids == seen[2] and len(action.logprobs) == len(action.completion_ids) > 0
        assert all(lp <= 0.0 for lp in action.logprobs)
        text = tokenizer.decode([t for t in action.completion_ids if t not in ends], skip_special_tokens=True)
        command = parse_text(text).command
        ratio = difflib.SequenceMatcher(None, " ".join((command or "").split()), WRITE, autojunk=False).ratio()
        assert reward == float(command is not None and ratio >= 0.95)


def test_step_profiling_keeps_the_candidates_whose_actions_disagree(tokenizer, reference, tmp_path):
    """The PivotRL preprocessing stage on a profiled run: every command step of the passed trajectory
    is a candidate; 4 actions each; only the step where they got different rewards is a pivot. The
    cost report counts its actions as one-step preprocessing rollouts, and a PivotRL run is charged
    this stage, not error profiling."""
    import json

    from mirl.cost.resources import resources
    from mirl.params import make
    from mirl.training.step_profiling import load_pivots, run_step_profiling

    traj, prompts = reference
    run = tmp_path / "run"
    (run / "profiling").mkdir(parents=True)
    (run / "profiling" / "trajectories.jsonl").write_text(json.dumps(traj.to_dict()) + "\n")
    (run / "profiling" / "summary.json").write_text("{}")
    task = make_task(tmp_path, task_id=traj.task)
    # plan order is ls (step 0), the write (2), the submission (3): at ls two of four actions match
    replies = {0: lambda i: bash("ls") if i % 2 else bash("pwd"), 1: lambda i: bash(WRITE), 2: lambda i: bash("cat x")}
    gen = ScriptedGenerator(tokenizer, lambda call, i: replies[call](i))
    p = make(step_profiling={"actions": 4, "workers": 1}, training={"start": "pivot", "environments": 0})
    summary = run_step_profiling(p, run, tasks=[task], progress=False, generator=gen)
    assert (summary["candidates"], summary["pivots"], summary["actions"]) == (3, 1, 4)
    [pivot] = load_pivots(run)
    assert (pivot["step"], pivot["rewards"]) == (0, [0.0, 1.0, 0.0, 1.0])
    assert [call[0] for call in gen.calls] == [prompts[0], prompts[2], prompts[3]]  # the reference sampler's prompts
    (run / "training").mkdir()
    (run / "training" / "params.json").write_text(json.dumps({"params": {"training": {"start": "pivot"}}}))
    df = resources(run)
    rows = df[df["stage"] == "step_profiling"]
    assert set(rows["phase"]) == {"preprocessing"} and rows["rollouts"].sum() == 12 and rows["policy_calls"].sum() == 12
    assert rows["policy_input_tokens"].sum() == 4 * (len(prompts[0]) + len(prompts[2]) + len(prompts[3]))
    assert rows["policy_output_tokens"].sum() == sum(len(s.ids) for s in gen.samples)
    assert "profiling" not in set(df["stage"])  # a PivotRL run is not charged the error profiling it reads
