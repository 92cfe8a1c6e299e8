"""Group-relative advantages and the refill of dead groups.

A group is the set of rollouts sampled from one prefix. Its advantages are the rewards minus the
group mean (centered, not divided by the standard deviation). Rollouts whose sandbox or verifier
failed for infrastructure reasons carry ``valid=False``: they say nothing about the policy, so they
are left out of the mean and get advantage 0 (and no loss), rather than being scored 0, which would
drag the mean down and reward the surviving rollouts for the infrastructure's faults.

A group is dead when its valid rewards are all equal (or fewer than two are valid): every advantage
is 0 and the group only dilutes the batch. `fill_batch` drops such groups and draws fresh ones until
the batch is full or a cap on tries is reached, as open-instruct's ``filter_zero_std_samples`` with
active sampling and DAPO's dynamic sampling do; the dead-group share it returns is logged per step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Group:
    """The rollouts of one prefix: one reward and one validity flag per rollout, plus what the caller
    needs to build the loss batch (`rollouts`, opaque here)."""

    prefix_id: str
    rewards: tuple[float, ...]
    valid: tuple[bool, ...]
    rollouts: tuple[Any, ...] = ()

    def __post_init__(self):
        if len(self.rewards) != len(self.valid):
            raise ValueError(f"group {self.prefix_id!r}: {len(self.rewards)} rewards but {len(self.valid)} validity flags")
        if self.rollouts and len(self.rollouts) != len(self.rewards):
            raise ValueError(f"group {self.prefix_id!r}: {len(self.rollouts)} rollouts but {len(self.rewards)} rewards")


def group_advantages(rewards: Sequence[float], valid: Sequence[bool] | None = None) -> list[float]:
    """Each valid rollout's reward minus the mean over the valid rollouts; invalid rollouts get 0.

    With no valid rollout every advantage is 0.
    """
    if valid is None:
        valid = [True] * len(rewards)
    if len(rewards) != len(valid):
        raise ValueError(f"group_advantages: {len(rewards)} rewards but {len(valid)} validity flags")
    kept = [float(r) for r, ok in zip(rewards, valid) if ok]
    if not kept:
        return [0.0] * len(rewards)
    mean = sum(kept) / len(kept)
    return [float(r) - mean if ok else 0.0 for r, ok in zip(rewards, valid)]


def is_dead(group: Group) -> bool:
    """True when the group gives no learning signal: fewer than two valid rollouts, or all valid
    rewards equal."""
    kept = [r for r, ok in zip(group.rewards, group.valid) if ok]
    return len(kept) < 2 or min(kept) == max(kept)


@dataclass
class Filled:
    """What `fill_batch` collected: the live groups kept, and how many groups were tried and dead."""

    batch_size: int
    groups: list[Group] = field(default_factory=list)
    tried: int = 0
    dead: int = 0

    @property
    def dead_share(self) -> float:
        """Share of the tried groups that were dead (0 when none was tried)."""
        return self.dead / self.tried if self.tried else 0.0

    @property
    def full(self) -> bool:
        return len(self.groups) == self.batch_size


def fill_batch(source: Iterable[Group], batch_size: int = 8, max_tries: int = 32) -> Filled:
    """Take groups from `source` until `batch_size` live groups are kept or `max_tries` groups were
    tried (or the source runs out); dead groups are dropped and counted.

    `source` is read lazily (a generator that samples a fresh group per step is the usual one), so no
    group is drawn past the one that fills the batch. The batch may come back short: the caller
    decides whether to train on it, and logs `dead_share`.
    """
    if batch_size < 1:
        raise ValueError(f"fill_batch: batch_size must be at least 1, got {batch_size}")
    if max_tries < batch_size:
        raise ValueError(f"fill_batch: max_tries ({max_tries}) is smaller than batch_size ({batch_size})")
    out = Filled(batch_size)
    for group in source:
        out.tried += 1
        if is_dead(group):
            out.dead += 1
        else:
            out.groups.append(group)
        if len(out.groups) == batch_size or out.tried == max_tries:
            break
    return out


def batch_advantages(groups: Sequence[Group]) -> tuple[list[float], list[bool]]:
    """Per rollout, in group order: its advantage and whether its tokens enter the loss.

    A rollout lost to the infrastructure gets advantage 0 and ``False``; its tokens must leave the
    loss mask too, or they would still count in the token-level mean's denominator.
    """
    advantages: list[float] = []
    train: list[bool] = []
    for group in groups:
        advantages += group_advantages(group.rewards, group.valid)
        train += [bool(ok) for ok in group.valid]
    return advantages, train
