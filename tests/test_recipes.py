"""Training recipes of a params file (`mirl.recipes`): listing, checks, run directories; and how the
evaluation's `selected` and the cost stage's default runs see them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mirl import params as pipeline
from mirl import recipes
from mirl.evaluate.policies import resolve_all
from mirl.runner.layout import RunDir
from mirl.runner.stage import StageError
from mirl.typed import ParamsError

REPO = Path(__file__).resolve().parents[1]


def write(d: Path, **files: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / f"{name}.yaml").write_text(text)
    return d


def test_the_bundled_experiment_lists_three_recipes_on_one_budget():
    exp = REPO / "params" / "small_scale" / "experiment.yaml"
    found = recipes.load(exp)
    assert [r.name for r in found] == ["mirl", "outcome-prefix", "tmax"]
    loaded = {r.name: pipeline.load(r.params_file).training for r in found}
    assert {(t.start, t.reward) for t in loaded.values()} == {("prefix", "mirl"), ("prefix", "outcome"),
                                                              ("random", "outcome")}
    assert len({(t.steps, t.batch_size, t.group_size, t.max_tries) for t in loaded.values()}) == 1
    # the listing file itself loads as a params file (the key is not a section)
    assert pipeline.load(exp).misbehavior_rate.policies == ["base", "selected"]


def test_overrides_reach_every_recipe_and_a_file_inherits_its_bases_list(tmp_path):
    d = write(tmp_path, base="training:\n  steps: 3\n", a="base: base.yaml\ntraining:\n  recipe: a\n",
              exp="base: base.yaml\nrecipes: [a.yaml]\n", more="base: exp.yaml\nprofiling:\n  seeds: 3\n")
    (r,) = recipes.load(d / "exp.yaml", {"training.steps": 1, "profiling.seeds": 2})
    assert r.name == "a" and r.params_file == (d / "a.yaml").resolve()
    assert recipes.load(d / "base.yaml") == []
    # a file starting from the listing file lists the same recipes (their other sections must match it)
    assert recipes.listed(d / "more.yaml") == [(d / "a.yaml").resolve()]
    with pytest.raises(ParamsError, match=r"changes profiling\.seeds"):
        recipes.load(d / "more.yaml")


@pytest.mark.parametrize(("listing", "files", "message"), [
    ("recipes: a.yaml\n", {}, "recipes must be a non-empty list"),
    ("recipes: [gone.yaml]\n", {}, r"recipe 'gone.yaml': no such params file"),
    ("recipes: [a.yaml, b.yaml]\n", {"a": "training:\n  recipe: x\n", "b": "training:\n  recipe: x\n"},
     r"b\.yaml: training\.recipe 'x' is also the name of .*a\.yaml"),
    ("recipes: [a.yaml]\n", {"a": "training:\n  recipe: ../up\n"}, "must be a plain name"),
    ("recipes: [a.yaml]\n", {"a": "training:\n  recipe: selected\n"}, "is a policy word"),
    ("recipes: [a.yaml]\n", {"a": "agent:\n  max_steps: 9\n"}, r"changes agent\.max_steps"),
    ("recipes: [a.yaml]\n", {"a": "recipes: [b.yaml]\n", "b": ""}, "cannot list recipes itself"),
])
def test_bad_recipe_lists_are_named(tmp_path, listing, files, message):
    write(tmp_path, exp=listing, **files)
    with pytest.raises(ParamsError, match=message) as e:
        recipes.load(tmp_path / "exp.yaml")
    assert str(tmp_path) in str(e.value)


def test_shared_stages_are_links_and_the_run_lists_the_params_recipes(tmp_path):
    run = tmp_path / "runs" / "t"
    (run / "prefixes").mkdir(parents=True)
    (run / "prefixes" / "summary.json").write_text('{"complete": true}')
    listed = [recipes.Recipe("tmax", tmp_path / "x.yaml"), recipes.Recipe("mirl", tmp_path / "y.yaml")]
    recipes.prepare(run, listed)
    own = run / "recipes" / "mirl"
    assert json.loads((own / "prefixes" / "summary.json").read_text()) == {"complete": True}
    assert os.readlink(own / "taxonomy") == os.path.join("..", "..", "taxonomy")
    assert recipes.link_shared(run, "mirl") == own  # idempotent
    # in the params' order, not the directories' (the first policy after base is the first recipe)
    assert {k: v.root for k, v in RunDir(run).recipes().items()} == {"tmax": run / "recipes" / "tmax", "mirl": own}
    recipes.prepare(run, listed[1:])  # a recipe dropped from the params is no longer one of the run's
    assert list(RunDir(run).recipes()) == ["mirl"] and (run / "recipes" / "tmax").is_dir()
    recipes.prepare(run, [])
    assert RunDir(run).recipes() == {}
    os.unlink(own / "taxonomy")
    (own / "taxonomy").mkdir()
    with pytest.raises(ParamsError, match="a directory of its own"):
        recipes.link_shared(run, "mirl")
    (own / "taxonomy").rmdir()
    (own / "taxonomy").write_text("")
    with pytest.raises(ParamsError, match="a file of its own"):
        recipes.prepare(run, listed)


def _selected(run: Path, recipe: str, step: int | None) -> None:
    train = run / "recipes" / recipe / "training"
    train.mkdir(parents=True)
    top = [] if step is None else [{"step": step}]
    (train / "selection.json").write_text(json.dumps({"top": top}))
    if step is not None:
        ckpt = train / "checkpoints" / f"step-{step:06d}"
        ckpt.mkdir(parents=True)
        (ckpt / "config.json").write_text("{}")


def _listed(run: Path, *names: str) -> None:
    (run / "recipes.json").write_text(json.dumps(list(names)))


def test_selected_is_each_recipes_checkpoint_named_by_the_recipe(tmp_path):
    run = tmp_path / "t"
    _selected(run, "mirl", 4)
    _selected(run, "tmax", 2)
    _selected(run, "untrained", None)
    _selected(run, "dropped", 3)  # trained once, no longer in the params
    _listed(run, "tmax", "mirl", "untrained")
    p = pipeline.make()
    got = resolve_all(["base", "selected"], RunDir(run), p)
    assert list(got) == ["base", "tmax", "mirl"]
    assert got["mirl"] == f"local/{run / 'recipes' / 'mirl' / 'training' / 'checkpoints' / 'step-000004'}"
    assert got["base"] == p.models.policy.model
    with pytest.raises(StageError, match="'tmax' is named in the policies and is a training recipe"):
        resolve_all(["tmax", "selected"], RunDir(run), p)
    # params without recipes: `selected` is the run's own training selection again
    (run / "recipes.json").unlink()
    assert list(resolve_all(["base", "selected"], RunDir(run), p)) == ["base"]


def test_a_checkpoint_written_anew_is_another_policy_to_the_evaluation(tmp_path):
    from mirl.evaluate.policies import weights_id

    run = tmp_path / "t"
    _selected(run, "mirl", 4)
    ckpt = run / "recipes" / "mirl" / "training" / "checkpoints" / "step-000004"
    (ckpt / "model.safetensors").write_bytes(b"old")
    (ckpt / "optimizer.pt").write_bytes(b"adam")
    before = weights_id(f"local/{ckpt}")
    assert before == weights_id(f"local/{ckpt}") and weights_id("local/smollm2") is None
    (ckpt / "optimizer.pt").unlink()  # dropped when a newer checkpoint is saved: the same weights
    assert weights_id(f"local/{ckpt}") == before
    (ckpt / "model.safetensors").write_bytes(b"newer")  # trained again to the same step
    assert weights_id(f"local/{ckpt}") != before


def test_cost_counts_each_recipes_run_beside_the_runs_own(tmp_path):
    from mirl.cost.stage import report, run_names

    run = tmp_path / "t"
    for name, rollouts in (("mirl", 32), ("tmax", 64)):
        _selected(run, name, 1)
        (run / "recipes" / name / "training" / "metrics.jsonl").write_text(json.dumps({"step": 1, "rollouts": rollouts}) + "\n")
    _listed(run, "mirl", "tmax")
    assert run_names(pipeline.make(), RunDir(run)) == ["t", "t/recipes/mirl", "t/recipes/tmax"]
    assert run_names(pipeline.make(cost={"runs": ["other"]}), RunDir(run)) == ["other"]
    rep = report(pipeline.make(cost={"paper_reference": "", "up_to_steps": {"tmax": 0}}), run)
    # runs are labelled by their last part everywhere; the reference is the first recipe
    assert list(rep.cuts) == ["t", "mirl", "tmax"] and rep.cuts["tmax"] == 0 and rep.reference == "mirl"
    assert set(rep.resources["run"]) == {"mirl", "tmax"}
    named = report(pipeline.make(cost={"paper_reference": "", "reference": "t/recipes/tmax"}), run)
    assert named.reference == "tmax"


def test_check_prints_each_recipes_budget_and_warns_when_they_differ(tmp_path):
    from mirl.batch import recipe_budgets

    d = write(tmp_path, base="training:\n  steps: 2\n", a="base: base.yaml\ntraining:\n  recipe: a\n",
              b="base: base.yaml\ntraining:\n  recipe: b\n  reward: outcome\n",
              exp="base: base.yaml\nrecipes: [a.yaml, b.yaml]\n")
    found = recipes.load(d / "exp.yaml")
    lines = recipe_budgets(found, {})
    t = pipeline.load(d / "a.yaml").training
    assert lines == [f"recipe a: start prefix, reward mirl; 2 steps x {t.batch_size} groups x {t.group_size} rollouts, "
                     f"at most {2 * t.max_tries * t.group_size} rollouts ({t.max_tries} tries a step)",
                     f"recipe b: start prefix, reward outcome; 2 steps x {t.batch_size} groups x {t.group_size} "
                     f"rollouts, at most {2 * t.max_tries * t.group_size} rollouts ({t.max_tries} tries a step)"]
    (d / "a.yaml").write_text("base: base.yaml\ntraining:\n  recipe: a\n  judge_scope: taxonomy\n")
    assert recipe_budgets(recipes.load(d / "exp.yaml"), {})[0].startswith(
        "recipe a: start prefix, reward mirl (judged over the taxonomy); 2 steps")
    (d / "a.yaml").write_text("base: base.yaml\ntraining:\n  recipe: a\n  forbid: [command-not-found]\n")
    assert recipe_budgets(recipes.load(d / "exp.yaml"), {})[0].startswith(
        "recipe a: start prefix, reward mirl (r_e also forbids command-not-found); 2 steps")
    (d / "b.yaml").write_text("base: base.yaml\ntraining:\n  recipe: b\n  steps: 3\n")
    assert recipe_budgets(recipes.load(d / "exp.yaml"), {})[-1].startswith("warning: the recipes' rollout budgets differ")

