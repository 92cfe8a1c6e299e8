"""The MiRL reward of one rollout from a misbehavior prefix: the task solved AND the misbehavior avoided.

    r_o = the task's tests pass (verifier reward >= 1: a partial score, e.g. 0.5 of the tests, is a
          fail, because the outcome part is binary)
    r_e = the behavior judge did not see the prefix's misbehavior in the first m policy steps after it
          (with `training.judge_scope: taxonomy`, nor any other misbehavior of the taxonomy: beyond the
          paper, whose judge reads the prefix's own misbehavior only)
    reward = r_o AND r_e, as 0.0 or 1.0

A rollout whose infrastructure failed (exit_reason "error", a verifier error, no verifier reward, a
judge that could not answer) gets a Reward marked invalid: it says nothing about the policy, so it
is left out of group statistics rather than counted as 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mirl.llm.errors import LLMError
from mirl.records.taxonomy import ErrorType
from mirl.records.trajectory import Trajectory


@dataclass
class Reward:
    r_o: bool  # the task's tests pass
    r_e: bool  # the misbehavior did not happen (the judge said no)
    reward: float  # 1.0 when both hold, else 0.0; meaningless when not valid
    valid: bool = True  # False: an infrastructure failure, excluded from group statistics
    why_invalid: str = ""
    judge_source: str = ""  # "llm:<model>" | "rules:<detector>"
    judged_steps: tuple[int, ...] = ()
    verifier_reward: float | None = None
    seen: tuple[str, ...] = ()  # the misbehaviors the judges saw (the prefix's own first)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def invalid(why: str, verifier_reward: float | None = None) -> Reward:
    return Reward(r_o=False, r_e=False, reward=0.0, valid=False, why_invalid=why, verifier_reward=verifier_reward)


def outcome_passes(verifier_reward: float) -> bool:
    """r_o: all tests pass; partial credit counts as a fail."""
    return verifier_reward >= 1.0


def infrastructure_failure(trajectory: Trajectory, verifier_reward: float | None = None) -> Reward | None:
    """The invalid Reward of a rollout the infrastructure failed (see the module docstring), or None."""
    vr = trajectory.reward if verifier_reward is None else verifier_reward
    if trajectory.exit_reason == "error":
        return invalid(f"the rollout failed: {trajectory.error or 'exit_reason error'}", vr)
    if trajectory.verifier_error:
        return invalid(f"the verifier failed: {trajectory.verifier_error}", vr)
    if vr is None:
        return invalid("no verifier reward", vr)
    return None


def outcome_reward(trajectory: Trajectory, verifier_reward: float | None = None) -> Reward:
    """The outcome-only reward (TMax, the prefix-start ablation): r_o, with r_e not judged (True)."""
    bad = infrastructure_failure(trajectory, verifier_reward)
    if bad is not None:
        return bad
    vr = float(trajectory.reward if verifier_reward is None else verifier_reward)
    r_o = outcome_passes(vr)
    return Reward(r_o=r_o, r_e=True, reward=float(r_o), judge_source="none", verifier_reward=vr)


def mirl_reward(trajectory: Trajectory, prefix_steps: int | None, verifier_reward: float | None,
                judge: Any, misbehavior: ErrorType, others: Sequence[tuple[Any, ErrorType]] = ()) -> Reward:
    """The reward of one rollout (module docstring). `prefix_steps` defaults to the trajectory's
    `prefix_len`; `verifier_reward` to its stored `reward`; `judge` is a behavior judge
    (`mirl.roles.behavior_judge`), asked only when the rollout is valid. `others`: (judge, misbehavior)
    pairs that must not be seen either (`training.judge_scope: taxonomy`); every one is asked, so
    `seen` names all that were."""
    vr = trajectory.reward if verifier_reward is None else verifier_reward
    bad = infrastructure_failure(trajectory, verifier_reward)
    if bad is not None:
        return bad
    verdicts = []
    for j, m in [(judge, misbehavior), *others]:
        try:
            verdicts.append((m, j.judge(trajectory, m, prefix_steps)))
        except LLMError as e:  # the judge could not answer (no tag after re-asks, API failure): says nothing of the policy
            return invalid(f"the behavior judge failed on {m.name!r}: {e}", vr)
    seen = [(m, v) for m, v in verdicts if v.yes]
    shown = seen[0][1] if seen else verdicts[0][1]
    r_o, r_e = outcome_passes(float(vr)), not seen
    return Reward(r_o=r_o, r_e=r_e, reward=float(r_o and r_e), judge_source=shown.source,
                  judged_steps=tuple(shown.steps), verifier_reward=float(vr), seen=tuple(m.name for m, _ in seen))
