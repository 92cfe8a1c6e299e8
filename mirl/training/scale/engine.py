"""`engine: scale`: the `TrainEngine` of the scale path (`mirl.training.engine` has the seam).

A DeepSpeed ZeRO learner (`zero_learner`) holds a float32 copy of the policy; rollouts are played
by Ray actors (`ray_rollouts`), each with its own policy engine, sandboxes and reward code, built
from the run's params in the actor (`worker_player`). After each step the learner's weights go to
this process's generator and to every actor's (`update_weights`).
"""

from __future__ import annotations

import copy
import time
from typing import Any

from mirl.training.engine import EmbeddedEngine, in_samplers_precision
from mirl.training.learner import LearnerConfig


class ScaleEngine(EmbeddedEngine):
    """A ZeRO learner, the driver's generator, and (once attached) a pool of rollout workers; sampling,
    the step, saving and loading are the embedded engine's, the hand-off also reaches the pool."""

    def __init__(self, generator: Any, config: LearnerConfig, zero_stage: int = 2, pool: Any = None):
        import torch

        from mirl.training.scale.zero_learner import ZeroLearner

        if not hasattr(generator, "model"):
            raise TypeError(f"{type(generator).__name__} holds no torch model for the learner to start from")
        self.generator, self.tokenizer, self.pool = generator, generator.tokenizer, pool
        model = copy.deepcopy(generator.model).to(device="cpu", dtype=torch.float32)
        self.learner = ZeroLearner(model, in_samplers_precision(config, generator), stage=zero_stage)

    def update_weights(self) -> float:
        t0 = time.perf_counter()
        state = self.learner.state_dict()
        dev = getattr(self.generator, "device", None)
        self.generator.update_weights({k: v.to(dev) if dev else v for k, v in state.items()})
        if self.pool is not None:
            self.pool.update_weights(state)
        return time.perf_counter() - t0


def rollout_pool(make_player: Any, scale: Any):
    """The Ray rollout workers of `training.scale`, each building its player with `make_player()` (a
    picklable callable: the stage knows how a player is made, this module only how workers are)."""
    from mirl.training.scale.ray_rollouts import RayRolloutPool

    return RayRolloutPool(make_player, workers=scale.rollout_workers, address=scale.ray_address,
                          cpus_per_worker=scale.cpus_per_worker)
