"""Ray rollout workers: two actors of a small local Ray play groups with the same player code, and
the Rollout records (token ids, logprobs, rewards) equal the in-process player's for the same seeds;
weights put in the object store reach every actor's generator."""

from __future__ import annotations

import functools
import importlib.util

import pytest

from mirl.training.rollouts import Start
from tests.real import missing
from tests.training.scale_doubles import make_player


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from transformers import AutoTokenizer

    from tests.engines.smollm2 import require_smollm2

    gguf = require_smollm2()
    d = tmp_path_factory.mktemp("tokenizer")
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(d)
    return str(d)


@pytest.fixture(scope="module")
def ray():
    if importlib.util.find_spec("ray") is None:
        missing("ray (the scale extra)", "bash scripts/setup.sh, or pip install 'mirl[scale]'")
    from tests.training.local_ray import start_local_ray

    ray = start_local_ray()
    yield ray
    ray.shutdown()


def records(groups):
    """Everything a rollout record holds but its timings."""
    out = []
    for g in groups:
        rows = []
        for r in g.rollouts:
            d = r.to_dict()
            d.pop("seconds")
            d["trajectory"].pop("timings")  # wall-clock seconds
            rows.append(d)
        out.append((g.prefix_id, g.rewards, g.valid, rows))
    return out


def test_ray_workers_play_the_in_process_players_rollouts(ray, tokenizer_dir):
    from mirl.training.scale.ray_rollouts import RayRolloutPool

    factory = functools.partial(make_player, tokenizer_dir)
    draws = [(d, Start(env=env)) for d, env in enumerate(["t1", "t2", "t1"])]
    local = factory().play_many(draws, group_size=3, seed=11)
    pool = RayRolloutPool(factory, workers=2)
    try:
        remote = pool.play_many(draws, group_size=3, seed=11)
        assert records(remote) == records(local)
        rs = [r for g in local for r in g.rollouts]
        assert all(r.trajectory.steps[-1].completion_ids and r.trajectory.steps[-1].logprobs for r in rs)
        assert len({r.seed for r in rs}) == 9 and len({r.reward.reward for r in rs}) == 2  # both outcomes occur
        # another seed is another set of rollouts (the records are not constant)
        assert records(pool.play_many(draws[:1], 3, seed=12)) != records(local[:1])
        # weights through the object store: every actor's generator now samples with them
        import torch

        pool.update_weights({"w": torch.ones(2)})
        moved = factory()
        moved.policy.update_weights({"w": torch.ones(2)})
        assert records(pool.play_many(draws, 3, seed=11)) == records(moved.play_many(draws, 3, seed=11)) != records(local)
    finally:
        pool.shutdown()
