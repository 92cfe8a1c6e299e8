"""Episodes that start where another left off: at a kept misbehavior prefix or at step 0 of a task.

Training plays groups of these (`mirl.training.rollouts.GroupPlayer` adds rewards) and the
misbehavior-rate stage plays one per held-out prefix and sample; both meet here, so neither stage
imports the other. A prefix is restored by its kept snapshot when this sandbox can start from it,
else by re-running its commands (`run_episode(prefix=...)`), and the continuation's trajectory says
whether the rerun reproduced (`meta["restore"]`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from mirl.agent.config import AgentConfig
from mirl.agent.episode import run_episode
from mirl.records.prefix import Prefix
from mirl.records.trajectory import Trajectory


@dataclass(frozen=True)
class Start:
    """Where an episode begins: a prefix (`prefix` set), a pivot step of a reference trajectory
    (`pivot` set, PivotRL), or step 0 of the environment `env`."""

    env: str
    prefix: Prefix | None = None
    pivot: Any = None  # a mirl.training.pivot.Pivot

    @property
    def id(self) -> str:
        if self.prefix is not None:
            return self.prefix.id
        return self.pivot.id if self.pivot is not None else f"{self.env}|step0"


def with_limits(agent: AgentConfig, max_steps: int) -> AgentConfig:
    """The agent settings of continuations: a step limit that counts the prefix, always verified,
    token ids on (RL trains on them)."""
    return replace(agent, max_steps=max_steps, verify=True, token_ids=True)


@dataclass
class Continuer:
    """What a continuation needs: tasks by id, the profiling trajectories prefixes point into, the
    sandbox, the policy (a client role model), the agent settings and how prefixes are restored."""

    tasks: dict[str, Any]
    trajectories: dict[tuple[str, int], Trajectory]
    sandbox: Any
    policy: Any
    agent: AgentConfig
    restore: str = "auto"  # auto | snapshot | rerun

    def prefix_steps(self, prefix: Prefix):
        traj = self.trajectories.get((prefix.env, prefix.seed))
        if traj is None:
            raise LookupError(f"prefix {prefix.id}: no profiling trajectory {prefix.env} seed {prefix.seed}")
        return traj.steps[: prefix.steps]

    def snapshot_of(self, prefix: Prefix) -> str | None:
        """The prefix's kept snapshot when this sandbox can start from it; None: re-run its commands.
        With restore "auto", a snapshot of another backend (the prefixes checked on bwrap, the run
        continued on a machine with only `local`) falls back to the rerun."""
        handle = prefix.restore.get("snapshot") if prefix.kept("snapshot") else None
        made_by = prefix.restore.get("snapshot_backend")
        name = getattr(self.sandbox, "name", None)
        usable = isinstance(handle, str) and callable(getattr(self.sandbox, "drop_snapshot", None)) and (
            made_by is None or made_by == name)
        if self.restore == "rerun" or not usable:
            if self.restore == "snapshot":
                why = "has no kept snapshot" if not isinstance(handle, str) else \
                    f"has a snapshot of the {made_by or 'other'} backend, which the {name} sandbox cannot start from"
                raise ValueError(f"prefix {prefix.id} {why} (restore: snapshot was asked)")
            return None
        return handle

    def continue_from(self, start: Start, seed: int) -> tuple[Trajectory, float]:
        """(the episode from `start`, its wall seconds)."""
        task = self.tasks[start.env]
        prefix, snapshot = None, None
        if start.prefix is not None:
            prefix = self.prefix_steps(start.prefix)
            snapshot = self.snapshot_of(start.prefix)
        t0 = time.perf_counter()
        traj = run_episode(task, self.sandbox, self.policy, self.agent, seed=seed, prefix=prefix, snapshot=snapshot)
        return traj, time.perf_counter() - t0
