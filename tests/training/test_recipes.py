"""The training recipes in params/train load (through their `base`), validate, and say what the paper says."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirl.params import load, read_file
from mirl.training.estimate import estimate
from mirl.training.stage import TrainingStage
from mirl.typed import ParamsError

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


def test_baselines_differ_from_mirl_only_in_start_reward_and_environments():
    mirl = load(RECIPES / "paper.yaml").training
    for name, start, reward, envs in [("tmax-189", "random", "outcome", 189), ("rar", "random", "rubric", 189),
                                      ("pivotrl", "pivot", "mirl", 189), ("ablation-env", "env", "outcome", 0),
                                      ("ablation-prefix", "prefix", "outcome", 0), ("mirl-0.25x", "prefix", "mirl", 47),
                                      ("mirl-0.5x", "prefix", "mirl", 94)]:
        t = load(RECIPES / f"{name}.yaml").training
        assert (t.start, t.reward, t.environments) == (start, reward, envs), name
        for k in ("group_size", "batch_size", "lr", "loss", "delta", "max_steps", "environments_seed"):
            assert getattr(t, k) == getattr(mirl, k), (name, k)
        assert t.steps == (1168 if name == "pivotrl" else mirl.steps), name
    pivot = load(RECIPES / "pivotrl.yaml")
    assert pivot.step_profiling.actions == 8 and pivot.training.gpu_budget_hours == 300


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
    with pytest.raises(StageError, match="judge_scope 'taxonomy' scopes the behavior judge of reward mirl"):
        TrainingStage(load(None, {"training.reward": "outcome", "training.judge_scope": "taxonomy"}), tmp_path)
    with pytest.raises(ParamsError, match="training.startt|startt"):
        load(None, {"training.startt": "random"})


def test_a_prefix_that_fills_max_steps_is_no_start(tmp_path):
    """A rollout from a prefix as long as `training.max_steps` is the prefix alone, the same every
    sample: such starts are left out, with the reason, instead of making every group dead."""
    import json

    from mirl.records.prefix import Prefix

    repo = RECIPES.parents[1]
    (tmp_path / "prefixes").mkdir()
    rows = [Prefix(id=f"m|{env}/0/{n}", misbehavior="m", error_id=f"{env}/0/{n}", env=env, seed=0, steps=n,
                   verdict={"exact": True}) for env, n in (("backup-env-file", 1), ("c-fix-compile-errors", 3))]
    (tmp_path / "prefixes" / "train.jsonl").write_text("".join(json.dumps(p.to_dict()) + "\n" for p in rows))
    p = load(None, {"training.reward": "outcome", "training.max_steps": 3, "profiling.tasks": str(repo / "tasks")})
    pool, skipped = TrainingStage(p, tmp_path).starts({})
    assert [s.env for s in pool] == ["backup-env-file"]
    assert skipped == {"its prefix fills training.max_steps (no step left to the policy)": 1}


@pytest.mark.parametrize("pivot_judge, calls_llm", [("difflib", False), ("llm", True), ("difflib+llm", True)])
def test_pivotrls_llm_step_judge_is_fingerprinted_and_estimated(tmp_path, pivot_judge, calls_llm):
    """`difflib+llm` calls the step judge for what SequenceMatcher does not match: its model is part of
    the run's identity and its calls are part of the launch estimate, as for `llm`."""
    from mirl.training.step_profiling import StepProfilingStage

    p = load(RECIPES / "pivotrl.yaml", {"training.pivot_judge": pivot_judge})
    assert ("step_judge" in TrainingStage(p, tmp_path / "t").fingerprint()["models"]) is calls_llm
    assert ("step_judge" in StepProfilingStage(p, tmp_path / "s").fingerprint()["models"]) is calls_llm
    e = estimate(p)
    assert (e["judge"], e["judge_calls"] > 0) == (("step_judge", True) if calls_llm else ("rules", False))
    if calls_llm:
        assert e["judge_model"] == p.models.step_judge.model
