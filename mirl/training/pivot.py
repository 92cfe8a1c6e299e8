"""The PivotRL baseline's groups: sample actions at steps of reference trajectories, reward matches.

A pivot is one step of a reference trajectory (one that passed its tests and stored its token ids).
At a pivot the policy samples `n` actions from exactly the prompt the reference's sampler saw at
that step; an action earns 1.0 when a step-equivalence judge (`mirl.roles.step_judge`) says it
matches the reference step, else 0.0. Steps whose actions all earn the same reward give no signal
(`mirl.training.advantages.is_dead`) and are dropped by `fill_batch`, which keeps exactly the
pivots where the actions disagree. Updates are one step long: the learner trains on the prompt plus
one sampled completion, with the loss mask on the completion only (`one_step_example`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from mirl.agent.parse import parse_reply
from mirl.agent.tokens import ChatGlue, turn_prompts
from mirl.llm.errors import LLMError
from mirl.records.trajectory import Step, Trajectory
from mirl.training.advantages import Group

N_ACTIONS = 8


@dataclass(frozen=True)
class Pivot:
    task: str
    seed: int
    step: int  # index of the reference step in its trajectory

    @property
    def id(self) -> str:
        return f"{self.task}#{self.seed}@{self.step}"


class PivotAction(NamedTuple):
    """What the learner needs of one sampled action."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]


def _is_reference(t: Trajectory, min_reward: float) -> bool:
    if t.reward is None or t.reward < min_reward or t.exit_reason == "error" or t.verifier_error:
        return False
    try:
        turn_prompts(t)
    except ValueError:  # no stored token ids: its prompts cannot be rebuilt
        return False
    return True


def pivot_candidates(trajectories: Iterable[Trajectory], min_reward: float = 1.0) -> list[Pivot]:
    """Every step with a command of every reference trajectory: one whose verifier reward is at
    least `min_reward`, with no rollout or verifier error, whose token ids rebuild its prompts."""
    return [Pivot(t.task, t.seed, i) for t in trajectories if _is_reference(t, min_reward)
            for i, s in enumerate(t.steps) if s.command is not None]


def pivot_prompt(trajectory: Trajectory, step: int) -> list[int]:
    """The prompt ids the sampler was given at `step`, rebuilt from the stored ids."""
    if not 0 <= step < len(trajectory.steps):
        raise IndexError(f"trajectory {trajectory.task}#{trajectory.seed} has {len(trajectory.steps)} steps; "
                         f"no step {step}")
    return turn_prompts(trajectory)[step]


def pivot_group(pivot: Pivot, trajectory: Trajectory, generator: Any, judge: Any, n: int = N_ACTIONS,
                sampling: dict[str, Any] | None = None) -> Group:
    """Sample `n` actions at the pivot and reward each 1.0 when `judge.same` says it matches the
    reference step. An action the judge could not rate (`LLMError`) is invalid, not a 0.
    `Group.rollouts` holds one `PivotAction` per action."""
    if (trajectory.task, trajectory.seed) != (pivot.task, pivot.seed):
        raise ValueError(f"pivot {pivot.id} does not belong to trajectory {trajectory.task}#{trajectory.seed}")
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    prompt = pivot_prompt(trajectory, pivot.step)
    reference, context = trajectory.steps[pivot.step], trajectory.steps[:pivot.step]
    action_format = str(trajectory.meta.get("action_format", "text"))
    glue = ChatGlue.of(generator.tokenizer, set(generator.end_ids))
    gen = generator.generate_tokens(list(prompt), list(range(n)), **(sampling or {}))
    if len(gen.samples) != n:
        raise ValueError(f"pivot {pivot.id}: asked the generator for {n} samples, got {len(gen.samples)}")
    rewards, valid, rollouts = [], [], []
    for sample in gen.samples:
        text = glue.text(sample.ids)
        parsed = parse_reply(action_format, text)
        action = Step(reasoning=parsed.reasoning, command=parsed.command, raw=text)
        try:
            same = bool(judge.same(context, reference, action))
            ok = True
        except LLMError:
            same, ok = False, False
        rewards.append(1.0 if same else 0.0)
        valid.append(ok)
        rollouts.append(PivotAction(list(prompt), list(sample.ids), list(sample.logprobs)))
    return Group(prefix_id=pivot.id, rewards=tuple(rewards), valid=tuple(valid), rollouts=tuple(rollouts))


def one_step_example(prompt_ids: Sequence[int], completion_ids: Sequence[int], logprobs: Sequence[float]
                     ) -> tuple[list[int], list[int], list[float]]:
    """(ids, loss mask, sampler logprobs) of one action: mask 1 and its logprob on each completion
    token, 0 on the prompt."""
    if not prompt_ids:
        raise ValueError("one_step_example: the prompt has no ids")
    if not completion_ids:
        raise ValueError("one_step_example: the completion has no ids, nothing to train on")
    if len(logprobs) != len(completion_ids):
        raise ValueError(f"one_step_example: {len(logprobs)} logprobs for {len(completion_ids)} completion ids")
    ids = [int(t) for t in prompt_ids] + [int(t) for t in completion_ids]
    mask = [0] * len(prompt_ids) + [1] * len(completion_ids)
    return ids, mask, [0.0] * len(prompt_ids) + [float(x) for x in logprobs]
