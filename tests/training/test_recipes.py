"""The training recipes in params/train load (through their `base`), validate, and say what the paper says."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirl.config import ParamsError
from mirl.params import load, read_file
from mirl.training.estimate import estimate
from mirl.training.stage import TrainingStage

RECIPES = Path(__file__).resolve().parents[2] / "params" / "train"


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_recipe_loads_and_validates(path, tmp_path):
    p = load(path)
    TrainingStage(p, tmp_path)  # raises on an inconsistent recipe
    assert p.training.recipe == ("mirl" if path.stem in ("paper", "demo") else path.stem)


def test_paper_recipe_holds_the_papers_settings():
    t = load(RECIPES / "paper.yaml").training
    assert (t.group_size, t.batch_size, t.steps, t.lr, t.loss, t.judge_steps) == (16, 8, 160, 1e-6, "dppo", 5)
    assert (t.start, t.reward, t.kl_coef, t.temperature, t.max_steps, t.delta) == ("prefix", "mirl", 0.0, 1.0, 64, 0.15)
    # the shared sections come from the base file, params/paper.yaml
    p = load(RECIPES / "paper.yaml")
    assert p.agent.action_format == "tool" and p.prefixes.per_misbehavior == 80
    e = estimate(p)
    assert e["rollouts"] == round(160 * 8 * 16 / (1 - 0.325)) and e["judge"] == "behavior_judge"


def test_baselines_differ_from_mirl_only_in_start_and_reward():
    mirl = load(RECIPES / "paper.yaml").training
    for name, start, reward in [("tmax-189", "random", "outcome"), ("rar", "random", "rubric"),
                                ("ablation-env", "env", "outcome"), ("ablation-prefix", "prefix", "outcome")]:
        t = load(RECIPES / f"{name}.yaml").training
        assert (t.start, t.reward) == (start, reward), name
        for k in ("group_size", "batch_size", "steps", "lr", "loss", "delta", "max_steps"):
            assert getattr(t, k) == getattr(mirl, k), (name, k)
    assert load(RECIPES / "pivotrl.yaml").training.pivot_samples == 8


def test_a_base_file_is_merged_key_by_key_and_cycles_are_refused(tmp_path):
    (tmp_path / "a.yaml").write_text("agent:\n  max_steps: 7\n  command_timeout_s: 9\ntraining:\n  steps: 3\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\nagent:\n  max_steps: 2\n")
    values = read_file(tmp_path / "b.yaml")
    assert values == {"agent": {"max_steps": 2, "command_timeout_s": 9}, "training": {"steps": 3}}
    (tmp_path / "c.yaml").write_text("base: d.yaml\n")
    (tmp_path / "d.yaml").write_text("base: c.yaml\n")
    with pytest.raises(ParamsError, match="leads back to itself"):
        read_file(tmp_path / "c.yaml")
    (tmp_path / "e.yaml").write_text("base: nowhere.yaml\n")
    with pytest.raises(ParamsError, match="no such params file"):
        read_file(tmp_path / "e.yaml")


def test_inconsistent_training_params_are_refused_by_name(tmp_path):
    from mirl.runner.stage import StageError

    with pytest.raises(StageError, match="reward mirl needs start prefix"):
        TrainingStage(load(None, {"training.start": "random"}), tmp_path)
    with pytest.raises(StageError, match="max_tries"):
        TrainingStage(load(None, {"training.max_tries": 2}), tmp_path)
    with pytest.raises(ParamsError, match="training.startt|startt"):
        load(None, {"training.startt": "random"})
