"""Rollout workers as Ray actors: the same `GroupPlayer` (episodes, sandboxes, rewards) in N processes.

Each actor builds its own player from `make_player` (a picklable function of no arguments, run in
the actor's process: sandboxes, task pools and the generator are made there, not shipped), so one
actor's sandboxes and engine are its own. `RayRolloutPool.play_many` has `GroupPlayer.play_many`'s
signature and result, so the stage's `collect` drives either: the draws of a wave are dealt round
robin to the actors, each plays its groups, and the groups come back in draw order. A rollout's
seed depends only on (run seed, draw, sample) (`rollout_seed`), not on which actor played it, so the
records equal what the in-process player produces.

After a learner step the new weights reach every actor's generator: through Ray's object store
(`update_weights`: one `ray.put`, each actor loads the same object), or over a sync group
(`join_sync` / `receive_weights`, `mirl.training.scale.weight_sync`), which is what GPU engines use.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from mirl.training.advantages import Group
from mirl.training.rollouts import GroupPlayer, Start


class RolloutWorker:
    """The body of one rollout actor (a plain class; `ray.remote` makes the actor of it)."""

    def __init__(self, make_player: Callable[[], GroupPlayer]):
        self.player = make_player()
        self.sync = None

    def play_many(self, draws: Sequence[tuple[int, Start]], group_size: int, seed: int) -> list[Group]:
        return self.player.play_many(draws, group_size, seed)

    def generator(self) -> Any:
        from mirl.agent.episode import policy_generator

        player = self.player  # a GroupPlayer's policy, or PivotPlayer's generator
        gen = policy_generator(player.policy) if hasattr(player, "policy") else getattr(player, "generator", None)
        if gen is None:
            raise TypeError(f"rollout worker: {type(player).__name__} has no token-level generator to load "
                            "weights into")
        return getattr(gen, "engine", gen)  # the client's wrapper holds the engine

    def update_weights(self, weights: Any) -> int:
        self.generator().update_weights(weights)
        return len(weights) if hasattr(weights, "__len__") else 0

    def join_sync(self, host: str, port: int, rank: int, world: int, backend: str = "") -> int:
        from mirl.training.scale.weight_sync import SyncGroup

        self.sync = SyncGroup.join(host, port, rank, world, backend=backend)
        return rank

    def receive_weights(self) -> int:
        if self.sync is None:
            raise RuntimeError("rollout worker: receive_weights before join_sync")
        return self.sync.receive_into(self.generator())


def ray_module():
    try:
        import ray
    except ImportError as e:
        raise ImportError("training.engine: scale needs Ray: pip install 'mirl[scale]'") from e
    return ray


class RayRolloutPool:
    """`workers` rollout actors behind `GroupPlayer.play_many` (see the module docstring).

    Connects to the Ray cluster at `address` (empty: the one already initialized in this process,
    else a local one of `num_cpus`)."""

    def __init__(self, make_player: Callable[[], GroupPlayer], workers: int = 2, address: str = "",
                 cpus_per_worker: float = 1.0, num_cpus: int | None = None):
        if workers < 1:
            raise ValueError(f"rollout workers must be at least 1, got {workers}")
        ray = ray_module()
        if not ray.is_initialized():
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
            if address:
                kw["address"] = address
            else:
                kw["num_cpus"] = num_cpus
            ray.init(**kw)
        actor = ray.remote(RolloutWorker)
        self.actors = [actor.options(num_cpus=cpus_per_worker).remote(make_player) for _ in range(workers)]

    def play_many(self, draws: Sequence[tuple[int, Start]], group_size: int, seed: int) -> list[Group]:
        ray = ray_module()
        dealt = [list(range(w, len(draws), len(self.actors))) for w in range(len(self.actors))]
        refs = [(idx, a.play_many.remote([draws[i] for i in idx], group_size, seed))
                for a, idx in zip(self.actors, dealt) if idx]
        out: list[Group | None] = [None] * len(draws)
        for idx, ref in refs:
            for i, g in zip(idx, ray.get(ref)):
                out[i] = g
        return out  # type: ignore[return-value]

    def update_weights(self, weights: Any) -> float:
        """Every actor's generator loads `weights` (a state dict, put once in the object store); seconds."""
        ray = ray_module()
        t0 = time.perf_counter()
        ref = ray.put({k: v.detach().cpu() for k, v in weights.items()} if isinstance(weights, dict) else weights)
        ray.get([a.update_weights.remote(ref) for a in self.actors])
        return time.perf_counter() - t0

    def shutdown(self) -> None:
        ray = ray_module()
        for a in self.actors:
            ray.kill(a)
        self.actors = []
