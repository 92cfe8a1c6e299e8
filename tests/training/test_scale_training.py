"""`training.engine: scale` end to end on a CPU: `run_training` with the DeepSpeed ZeRO learner in this
process and two real Ray rollout actors, each with its own tiny policy and bubblewrap sandbox, on a
task whose tests pass by a coin flip (every group of 4 is live with chance 7/8; 8 tries per step).

The actors' receipt of the weights is checked by what they sample after it: step 2's rollouts carry
the log-probabilities of the step-1 checkpoint, not of the base model; step 1's those of the base.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from mirl.agent.tokens import training_sequence
from mirl.jsonl import read_jsonl
from mirl.params import make
from mirl.records.trajectory import Trajectory
from tests.conftest import write_task
from tests.real import missing

COIN = "#!/bin/bash\necho $((RANDOM % 2)) > /logs/verifier/reward.txt\n"


@pytest.fixture
def ray_cluster():
    for module in ("ray", "deepspeed"):
        if importlib.util.find_spec(module) is None:
            missing(f"{module} (the scale extra)", "bash scripts/setup.sh, or pip install 'mirl[scale]'")
    from tests.training.local_ray import start_local_ray

    ray = start_local_ray()
    yield ray
    ray.shutdown()


def sampled_logprobs(model, traj: Trajectory) -> tuple[list[float], list[float]]:
    """(the sampler's, `model`'s teacher-forced) logprobs of the episode's sampled tokens."""
    from mirl.engines.generator import teacher_forced_logprobs

    ids, mask, stored = training_sequence(traj)
    forced = teacher_forced_logprobs(model, ids[:1], ids[1:])
    keep = [i for i in range(1, len(ids)) if mask[i]]
    return [stored[i] for i in keep], [forced[i - 1] for i in keep]


def largest_gap(model, rollouts) -> float:
    gaps = [abs(a - b) for r in rollouts for a, b in zip(*sampled_logprobs(model, Trajectory.from_dict(r["trajectory"])))]
    assert gaps, "no sampled token"
    return max(gaps)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_scale_training_runs_with_ray_workers_that_receive_the_weights(tmp_path, ray_cluster, bwrap_sandbox):
    from transformers import AutoModelForCausalLM

    from mirl.tasks import load_task
    from mirl.training.stage import run_training
    from tests.engines.tiny import tiny_checkpoint

    policy = tiny_checkpoint(tmp_path / "policy")
    task = load_task(write_task(tmp_path / "tasks" / "coin", test_sh=COIN, instruction="List /app, then submit.\n"))
    run = tmp_path / "run"
    prof = run / "profiling"  # the stage reads profiling's outputs: none played here
    prof.mkdir(parents=True)
    (prof / "trajectories.jsonl").write_text("")
    (prof / "summary.json").write_text("{}")
    (prof / "params.json").write_text(json.dumps({"params": {"profiling": {"tasks": str(tmp_path / "tasks")}}}))
    p = make(models={"policy": {"model": f"local/{policy}", "max_tokens": 8, "temperature": 1.0}},
             sandbox={"backend": "bwrap"}, agent={"max_steps": 2, "command_timeout_s": 20},
             training={"engine": "scale", "scale": {"rollout_workers": 2, "zero_stage": 2},
                       "start": "random", "reward": "outcome", "recipe": "tmax", "tasks": str(tmp_path / "tasks"),
                       "steps": 2, "batch_size": 1,
                       "group_size": 4, "max_tries": 8, "max_steps": 2, "checkpoint_every": 1, "lr": 5e-2,
                       "workers": 2})
    summary = run_training(p, run, tasks=[task], progress=False)
    assert summary["done"] == 2 and summary["complete"], summary
    metrics = read_jsonl(run / "training" / "metrics.jsonl")[0]
    assert all(m["groups_live"] == 1 and m["loss_tokens"] > 0 for m in metrics), metrics  # both steps trained
    rollouts = read_jsonl(run / "training" / "rollouts.jsonl")[0]
    first, second = ([r for r in rollouts if r["step"] == s and r["reward"]["valid"]] for s in (1, 2))
    base = AutoModelForCausalLM.from_pretrained(policy).float().eval()
    stepped = AutoModelForCausalLM.from_pretrained(run / "training" / "checkpoints" / "step-000001").float().eval()
    moved = max(float((a - b).abs().max()) for a, b in zip(base.state_dict().values(), stepped.state_dict().values()))
    assert moved > 1e-2, "the first step did not move the weights"
    with torch.no_grad():
        # the actors sampled step 1 with the base weights and step 2 with the step-1 weights they received
        assert largest_gap(base, first) < 1e-3
        assert largest_gap(stepped, second) < 1e-3
        assert largest_gap(base, second) > 1e-2
