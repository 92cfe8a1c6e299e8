"""Training examples from stored rollouts: the ids the sampler saw, and which of them are trained on.

Only tokens the policy sampled after the prefix carry loss: the prefix's steps (even ones that were
once sampled), teacher and other context steps, tool outputs and template glue all get mask 0. The
sequence comes from the stored ids (`mirl.agent.tokens.training_sequence`), never from re-tokenized
text, so a text-only trajectory cannot be trained on and says which step lacks ids.
"""

from __future__ import annotations

from mirl.agent.tokens import training_sequence
from mirl.records.trajectory import Step, Trajectory


class NoTokenIds(ValueError):
    """A trajectory (or one of its steps) without stored token ids: it cannot become a training example."""


def trains_on(step: Step, index: int, prefix_steps: int) -> bool:
    """Whether a step's completion ids carry loss: sampled by the policy, after the prefix."""
    return (index >= prefix_steps and step.source == "policy" and step.tokens == "sampled"
            and step.logprobs is not None and step.completion_ids is not None
            and len(step.logprobs) == len(step.completion_ids))


def training_example(trajectory: Trajectory, prefix_steps: int | None = None
                     ) -> tuple[list[int], list[int], list[float]]:
    """(input_ids, loss_mask, sampler_logprobs) of one rollout; `prefix_steps` defaults to its `prefix_len`."""
    prefix = trajectory.prefix_len if prefix_steps is None else prefix_steps
    name = f"trajectory {trajectory.task}#{trajectory.seed}"
    if trajectory.prompt_ids is None:
        raise NoTokenIds(f"{name} has no prompt ids: its policy returned text only, so it cannot be trained on")
    for i, s in enumerate(trajectory.steps):
        if s.completion_ids is None or s.observation_ids is None:
            raise NoTokenIds(f"{name}: step {i} ({s.source}, tokens={s.tokens!r}) has no token ids; "
                             "a text-only step cannot be trained on")
        if i >= prefix and s.source == "policy" and s.tokens == "sampled" and not trains_on(s, i, prefix):
            raise NoTokenIds(f"{name}: step {i} is marked sampled but its logprobs do not match its "
                             f"{len(s.completion_ids)} completion ids")
    ids, _, logprobs = training_sequence(trajectory)
    mask = [0] * len(trajectory.prompt_ids)
    for i, s in enumerate(trajectory.steps):
        mask += [int(trains_on(s, i, prefix))] * len(s.completion_ids or []) + [0] * len(s.observation_ids or [])
    if len(mask) != len(ids):
        raise AssertionError(f"{name}: mask of {len(mask)} positions for {len(ids)} ids")
    logprobs = [lp if m else 0.0 for lp, m in zip(logprobs, mask)]
    return ids, mask, logprobs
