"""`training.engine: scale` in params and the stage: the scale section's keys checked like every
params key, its bad values refused by the stage, and the scale engine (a single-process DeepSpeed
ZeRO learner) handing its stepped weights to the embedded generator and to the rollout workers."""

from __future__ import annotations

import dataclasses
import importlib.util
import random
from pathlib import Path

import pytest
import torch

from mirl.params import load, make
from mirl.runner.stage import StageError
from mirl.training.params import ScaleParams
from mirl.training.stage import TrainingStage, make_engine
from mirl.typed import ParamsError
from tests.real import missing

ROOT = Path(__file__).resolve().parents[2]
SCALE_YAML = ROOT / "params/train/scale.yaml"


def test_the_scale_params_file_loads_and_unknown_keys_are_refused():
    p = load(SCALE_YAML)
    assert p.training.engine == "scale" and p.training.scale == ScaleParams(rollout_workers=2, zero_stage=2)
    assert p.training.group_size == load(ROOT / "params/train/demo.yaml").training.group_size  # the demo's base
    with pytest.raises(ParamsError, match=r"scale\.yaml.*training\.scale\.zero\b.*known: .*zero_stage"):
        load(SCALE_YAML, ["training.scale.zero=3"])
    with pytest.raises(ParamsError, match="training.engine: must be one of"):
        make(training={"engine": "ray"})
    with pytest.raises(ParamsError, match=r"training\.scale\.rollout_workers: must be at least 1, got 0"):
        make(training={"scale": {"rollout_workers": 0}})  # meaningless whatever the engine
    assert all(f.metadata.get("help") for f in dataclasses.fields(ScaleParams))


@pytest.mark.parametrize("scale,message", [({"zero_stage": 1}, "zero_stage must be 2 or 3"),
                                           ({"learners": 2}, "learners is 2: .*torchrun")])
def test_the_stage_refuses_bad_scale_settings(tmp_path, scale, message):
    with pytest.raises(StageError, match=message):
        TrainingStage(make(training={"engine": "scale", "scale": scale}), tmp_path)
    TrainingStage(make(training={"scale": scale}), tmp_path)  # ignored by the embedded engine


def test_the_cli_checks_the_scale_params(capsys, tmp_path):
    from mirl.cli import main

    assert main(["train", "--params", str(SCALE_YAML), "--runs", str(tmp_path), "--check"]) in (0, None)
    assert "estimate" in capsys.readouterr().out


class RecordingPool:
    def __init__(self):
        self.sent = []

    def update_weights(self, state):
        self.sent.append({k: v.clone() for k, v in state.items()})
        return 0.0


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from tests.engines.tiny import tiny_checkpoint

    return tiny_checkpoint(tmp_path_factory.mktemp("scale-policy"))


def test_the_scale_engine_hands_its_step_to_the_generator_and_the_workers(checkpoint, tmp_path):
    if importlib.util.find_spec("deepspeed") is None:
        missing("deepspeed (the scale extra)", "bash scripts/setup.sh, or pip install 'mirl[scale]'")
    from mirl.engines.embedded import EmbeddedLM
    from mirl.engines.generator import teacher_forced_logprobs
    from mirl.training.learner import Example
    from mirl.training.scale.engine import ScaleEngine

    gen = EmbeddedLM(checkpoint, device="cpu", prefill_chunk=16, prefill_bf16=False)
    t = make(training={"engine": "scale", "lr": 5e-2, "scale": {"zero_stage": 2}}).training
    engine = make_engine(gen, t)
    assert isinstance(engine, ScaleEngine) and engine.learner.stage == 2
    assert engine.learner.config.bf16 is False and not engine.learner.bf16  # a float32 sampler: a float32 learner
    engine.pool = pool = RecordingPool()
    rng = random.Random(0)
    vocab = gen.model.config.vocab_size
    exs = [Example([rng.randrange(vocab) for _ in range(10)], [0] * 3 + [1] * 7, [0.0] * 3 + [-10.0] * 7)
           for _ in range(3)]
    before = {k: v.clone() for k, v in engine.learner.state_dict().items()}
    stats = engine.train_step(exs, [1.0, -1.0, 0.5])
    assert stats["loss_tokens"] == 21 and stats["ranks"] == 1
    engine.update_weights()
    learned = engine.learner.state_dict()
    assert max(float((learned[k] - before[k]).abs().max()) for k in before) > 1e-2  # the step moved them
    assert len(pool.sent) == 1 and all(torch.equal(pool.sent[0][k], learned[k]) for k in learned)
    prompt = [1, 28, 1142, 314, 253, 2]
    for s in gen.generate_tokens(prompt, [0, 1], max_tokens=6, temperature=1.0, seed=3).samples:
        want = teacher_forced_logprobs(engine.learner.model, prompt, s.ids)
        assert max(abs(a - b) for a, b in zip(want, s.logprobs)) < 1e-4
    # a checkpoint: Hugging Face weights plus DeepSpeed's optimizer state; a fresh engine resumes from it
    engine.save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "config.json").exists() and (tmp_path / "ckpt" / "zero").is_dir()
    fresh = make_engine(EmbeddedLM(checkpoint, device="cpu", prefill_chunk=16, prefill_bf16=False), t)
    fresh.load(tmp_path / "ckpt")
    assert fresh.learner.steps == 1
    resumed = fresh.learner.state_dict()
    assert all(torch.equal(resumed[k], learned[k]) for k in learned)
    # the optimizer state came along: the next step from either engine is the same
    a, b = engine.train_step(exs, [1.0, -1.0, 0.5]), fresh.train_step(exs, [1.0, -1.0, 0.5])
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
    after_a, after_b = engine.learner.state_dict(), fresh.learner.state_dict()
    assert max(float((after_a[k] - after_b[k]).abs().max()) for k in after_a) < 1e-6
