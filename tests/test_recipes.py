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


def test_overrides_reach_every_recipe(tmp_path):
    d = write(tmp_path, base="training:\n  steps: 3\n", a="base: base.yaml\ntraining:\n  recipe: a\n",
              exp="base: base.yaml\nrecipes: [a.yaml]\n")
    (r,) = recipes.load(d / "exp.yaml", {"training.steps": 1, "profiling.seeds": 2})
    assert r.name == "a" and r.params_file == (d / "a.yaml").resolve()
    assert recipes.load(d / "base.yaml") == []


@pytest.mark.parametrize(("listing", "files", "message"), [
    ("recipes: a.yaml\n", {}, "recipes must be a non-empty list"),
    ("recipes: [gone.yaml]\n", {}, r"recipe 'gone.yaml': no such params file"),
    ("recipes: [a.yaml, b.yaml]\n", {"a": "training:\n  recipe: x\n", "b": "training:\n  recipe: x\n"},
     r"b\.yaml: training\.recipe 'x' is also the name of .*a\.yaml"),
    ("recipes: [a.yaml]\n", {"a": "training:\n  recipe: ../up\n"}, "must be a plain name"),
    ("recipes: [a.yaml]\n", {"a": "agent:\n  max_steps: 9\n"}, r"changes agent\.max_steps"),
    ("recipes: [a.yaml]\n", {"a": "recipes: [b.yaml]\n", "b": ""}, "cannot list recipes itself"),
])
def test_bad_recipe_lists_are_named(tmp_path, listing, files, message):
    write(tmp_path, exp=listing, **files)
    with pytest.raises(ParamsError, match=message) as e:
        recipes.load(tmp_path / "exp.yaml")
    assert str(tmp_path) in str(e.value)


def test_shared_stages_are_links_and_a_real_directory_is_refused(tmp_path):
    run = tmp_path / "runs" / "t"
    (run / "prefixes").mkdir(parents=True)
    (run / "prefixes" / "summary.json").write_text('{"complete": true}')
    own = recipes.link_shared(run, "mirl")
    assert own == run / "recipes" / "mirl"
    assert json.loads((own / "prefixes" / "summary.json").read_text()) == {"complete": True}
    assert recipes.link_shared(run, "mirl") == own  # idempotent
    assert {k: v.root for k, v in RunDir(run).recipes().items()} == {"mirl": own}
    os.unlink(own / "taxonomy")
    (own / "taxonomy").mkdir()
    with pytest.raises(ParamsError, match="a directory of its own"):
        recipes.link_shared(run, "mirl")


def _selected(run: Path, recipe: str, step: int | None) -> None:
    train = run / "recipes" / recipe / "training"
    train.mkdir(parents=True)
    top = [] if step is None else [{"step": step}]
    (train / "selection.json").write_text(json.dumps({"top": top}))
    if step is not None:
        ckpt = train / "checkpoints" / f"step-{step:06d}"
        ckpt.mkdir(parents=True)
        (ckpt / "config.json").write_text("{}")


def test_selected_is_each_recipes_checkpoint_named_by_the_recipe(tmp_path):
    run = tmp_path / "t"
    _selected(run, "mirl", 4)
    _selected(run, "tmax", 2)
    _selected(run, "untrained", None)
    p = pipeline.make()
    got = resolve_all(["base", "selected"], RunDir(run), p)
    assert list(got) == ["base", "mirl", "tmax"]
    assert got["mirl"] == f"local/{run / 'recipes' / 'mirl' / 'training' / 'checkpoints' / 'step-000004'}"
    assert got["base"] == p.models.policy.model
    with pytest.raises(StageError, match="'tmax' is named in the policies and is a training recipe"):
        resolve_all(["tmax", "selected"], RunDir(run), p)


def test_cost_counts_each_recipes_run_beside_the_runs_own(tmp_path):
    from mirl.cost.stage import run_names

    run = tmp_path / "t"
    _selected(run, "mirl", 2)
    assert run_names(pipeline.make(), RunDir(run)) == ["t", "t/recipes/mirl"]
    assert run_names(pipeline.make(cost={"runs": ["other"]}), RunDir(run)) == ["other"]
