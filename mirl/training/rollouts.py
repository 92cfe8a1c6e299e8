"""Groups of rollouts for training: where they start, how they are played and rewarded.

A `Start` is what one group begins from: a kept misbehavior prefix (its environment restored to the
prefix's state, by snapshot when the prefix stage kept one, else by re-running its commands), or
step 0 of an environment. `Starts` draws them in a seeded order that does not depend on what was
drawn for other reasons (draw k is the k-th element of a per-epoch shuffle), so a resumed run that
knows how many groups it drew continues the same sequence.

`play_group` runs the G rollouts of one start at once (the embedded engine decodes them as one
batch), rewards each (`mirl.training.rewards`), and returns a `Group` whose rollouts carry the
trajectory and its reward. A rollout whose sandbox, verifier or judge failed, or whose prefix did
not reproduce on re-run, is marked invalid: excluded from the group's statistics, not scored 0.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from mirl.agent.continuation import Continuer, Start
from mirl.records.prefix import Prefix
from mirl.records.taxonomy import ErrorType
from mirl.records.trajectory import Step, Trajectory
from mirl.training.advantages import Group
from mirl.training.rewards import Reward, invalid, mirl_reward, outcome_reward


class Starts:
    """An endless, seeded sequence of starts: epoch e is a shuffle of the pool with seed (seed, e)."""

    def __init__(self, pool: Sequence[Start], seed: int = 0):
        if not pool:
            raise ValueError("no starts to train from (no kept prefixes or environments)")
        self.pool, self.seed = list(pool), seed
        self._epochs: dict[int, list[Start]] = {}

    def __getitem__(self, k: int) -> Start:
        epoch, i = divmod(k, len(self.pool))
        if epoch not in self._epochs:
            order = list(self.pool)
            random.Random(f"{self.seed}:epoch:{epoch}").shuffle(order)
            self._epochs = {epoch: order}  # only the current epoch is kept
        return self._epochs[epoch][i]


@dataclass
class Rollout:
    """One rollout of a group, as the training log stores it."""

    start: str
    sample: int
    seed: int
    trajectory: Trajectory
    reward: Reward
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "sample": self.sample, "seed": self.seed, "reward": self.reward.to_dict(),
                "seconds": self.seconds, "trajectory": self.trajectory.to_dict()}


def rollout_seed(base: int, draw: int, sample: int, group_size: int) -> int:
    """A distinct, reproducible seed per (draw, sample) of a run."""
    return base * 1_000_003 + draw * group_size + sample


@dataclass
class GroupPlayer(Continuer):
    """Continuations in groups, each rewarded: the continuer's tasks, profiling trajectories, sandbox,
    policy (a client role model with a generator) and agent settings, plus the reward."""

    reward: str = "outcome"  # "mirl" | "outcome" | "rubric"
    judges: Callable[[str], Any] | None = None  # misbehavior name -> behavior judge
    misbehaviors: dict[str, ErrorType] = field(default_factory=dict)
    rubric_reward: Callable[[Trajectory, str], Reward] | None = None  # (rollout, env) -> RaR+ reward
    scope: tuple[str, ...] = ()  # `training.judge_scope: taxonomy`: the misbehaviors r_e judges besides the prefix's
    forbid: tuple[tuple[Any, ErrorType], ...] = ()  # `training.forbid`: (rule judge, detector as misbehavior) pairs
    workers: int = 16

    def play(self, start: Start, draw: int, group_size: int, seed: int) -> Group:
        """The group of `start` (the `draw`-th of the run): `group_size` rollouts, each rewarded."""
        return self.play_many([(draw, start)], group_size, seed)[0]

    def play_many(self, draws: Sequence[tuple[int, Start]], group_size: int, seed: int) -> list[Group]:
        """Several groups' rollouts played at once (`workers` at a time), grouped back in order."""
        jobs = [(g, start, i, rollout_seed(seed, draw, i, group_size))
                for g, (draw, start) in enumerate(draws) for i in range(group_size)]
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(jobs)))) as pool:
            done = list(pool.map(lambda j: self.one(j[1], j[2], j[3]), jobs))
        groups = []
        for g, (_, start) in enumerate(draws):
            rollouts = [r for (gi, *_), r in zip(jobs, done) if gi == g]
            groups.append(Group(prefix_id=start.id, rewards=tuple(r.reward.reward for r in rollouts),
                                valid=tuple(r.reward.valid for r in rollouts), rollouts=tuple(rollouts)))
        return groups

    def one(self, start: Start, sample: int, seed: int) -> Rollout:
        traj, played = self.continue_from(start, seed)
        t1 = time.perf_counter()
        reward = self.score(traj, start)
        return Rollout(start=start.id, sample=sample, seed=seed, trajectory=traj, reward=reward,
                       seconds={"rollout_s": round(played, 4), "reward_s": round(time.perf_counter() - t1, 4)})

    def score(self, traj: Trajectory, start: Start) -> Reward:
        restore = traj.meta.get("restore") or {}
        if start.prefix is not None and restore and not restore.get("normalized", True):
            return invalid(f"the prefix did not reproduce at step {restore.get('first_mismatch')}", traj.reward)
        if self.reward == "outcome":
            return outcome_reward(traj)
        if self.reward == "rubric":
            if self.rubric_reward is None:
                raise ValueError("reward: rubric needs a rubric reward")
            return self.rubric_reward(traj, start.env)
        if start.prefix is None:
            raise ValueError("reward: mirl needs prefix starts (a misbehavior to avoid)")
        name = start.prefix.misbehavior
        if self.judges is None or name not in self.misbehaviors:
            raise ValueError(f"no behavior judge for misbehavior {name!r}")
        others = [(self.judges(other), self.misbehaviors[other]) for other in self.scope if other != name]
        others += [(j, m) for j, m in self.forbid if m.name not in {name, *self.scope}]
        return mirl_reward(traj, traj.prefix_len, None, self.judges(name), self.misbehaviors[name], others)


def prefix_starts(prefixes: Sequence[Prefix], keep: Callable[[Prefix], bool] = lambda p: True) -> list[Start]:
    return [Start(env=p.env, prefix=p) for p in prefixes if keep(p)]


def env_starts(envs: Sequence[str]) -> list[Start]:
    return [Start(env=e) for e in sorted(set(envs))]


@dataclass
class PivotPlayer:
    """PivotRL's groups: at each pivot, `n` one-step actions sampled from the prompt the reference's
    sampler saw, rewarded 1.0 when the step judge says they match the reference step. Each action
    becomes a one-step `Rollout` (the prompt ids, the sampled step), so the learner batch and the
    logs are the same as for full rollouts."""

    trajectories: dict[tuple[str, int], Trajectory]
    generator: Any
    judge: Any
    workers: int = 16

    def play_many(self, draws: Sequence[tuple[int, Start]], group_size: int, seed: int) -> list[Group]:
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(draws)))) as pool:
            return list(pool.map(lambda d: self.play(d[1], d[0], group_size, seed), draws))

    def play(self, start: Start, draw: int, group_size: int, seed: int) -> Group:
        from mirl.training.pivot import pivot_group

        pv = start.pivot
        ref = self.trajectories[(pv.task, pv.seed)]
        t0 = time.perf_counter()
        sampling = {"seed": rollout_seed(seed, draw, 0, group_size)}
        g = pivot_group(pv, ref, self.generator, self.judge, n=group_size, sampling=sampling)
        seconds = {"rollout_s": round((time.perf_counter() - t0) / max(1, group_size), 4), "reward_s": 0.0}
        rollouts = []
        for i, (action, r, ok) in enumerate(zip(g.rollouts, g.rewards, g.valid)):
            text = self.generator.tokenizer.decode(action.completion_ids, skip_special_tokens=True)
            step = Step(reasoning="", command=None, raw=text, tokens="sampled", completion_ids=list(action.completion_ids),
                        logprobs=list(action.logprobs), observation_ids=[])
            usage = {"calls": 1, "input_tokens": len(action.prompt_ids), "cached_input_tokens": 0,
                     "output_tokens": len(action.completion_ids)}  # one call per action, as the cost report counts
            traj = Trajectory(task=pv.task, seed=pv.seed, models={}, steps=[step], prompt_ids=list(action.prompt_ids),
                              exit_reason="pivot", meta={"pivot": pv.id, "reference": ref.steps[pv.step].command,
                                                         "usage": usage})
            reward = Reward(r_o=bool(r), r_e=True, reward=float(r), valid=ok, judge_source="step_judge",
                            why_invalid="" if ok else "the step judge failed")
            rollouts.append(Rollout(start=start.id, sample=i, seed=sampling["seed"], trajectory=traj, reward=reward,
                                    seconds=seconds))
        return Group(prefix_id=start.id, rewards=g.rewards, valid=g.valid, rollouts=tuple(rollouts))


