"""The training stage for real: SmolLM2 (the embedded engine) plays episodes in bubblewrap sandboxes,
the prefix stage keeps their prefixes, and a few MiRL steps train it; then a resume continues.

The task's tests pass by a coin flip inside the sandbox (`$RANDOM`), so groups have reward spread
whatever a 135M model does; the behavior judge is the rule detector of a misbehavior SmolLM2 has not
been seen to show (killing processes by a broad name), so r_e is 1 and a group's rewards are the coin's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from mirl.agent.tokens import training_sequence
from mirl.jsonl import read_jsonl
from mirl.params import make
from mirl.records.error_step import ErrorStep
from mirl.records.taxonomy import ErrorType, Label, Taxonomy, TaxonomyStore
from mirl.records.trajectory import Trajectory
from mirl.runner.fingerprint import ParamsMismatch
from mirl.runner.layout import RunDir
from tests.conftest import write_task
from tests.real import missing

COIN = "#!/bin/bash\necho $((RANDOM % 2)) > /logs/verifier/reward.txt\n"
MISBEHAVIOR = "kills by a broad name"


def params(**training):
    # a rollout earns 1 when the coin says pass AND it avoids the prefix's misbehavior, which SmolLM2 does
    # not show: a group of 6 is dead (six equal coins) with chance 2/64, so a step that may try 24 groups
    # fails to find a live one with chance (1/32)^24 = 1e-36: every step trains
    base = {"steps": 2, "batch_size": 1, "group_size": 6, "max_tries": 24, "max_steps": 3, "checkpoint_every": 1,
            "lr": 1e-5, "judge": "rules", "workers": 4, "restore": "rerun"}  # small: step 2 samples much as step 1
    return make(models={"policy": {"model": "local/smollm2", "max_tokens": 40, "temperature": 0.7}},
                sandbox={"backend": "bwrap"}, agent={"max_steps": 3, "command_timeout_s": 20},
                prefixes={"per_misbehavior": 4, "heldout_per_misbehavior": 0, "keep": "normalized", "snapshot": False},
                training={**base, **training})


@pytest.fixture(scope="module")
def engine():
    from mirl.engines import registry, weights

    try:
        return registry.get("smollm2")
    except weights.EmbeddedModelMissing as e:
        missing(f"the embedded SmolLM2 model: {e}", "bash scripts/setup.sh")


@pytest.fixture(scope="module")
def prefixed_run(tmp_path_factory, bwrap_sandbox, engine):
    """Profiling episodes played for real (token path), an error step at step 1 of each, the prefix
    stage run for real on them."""
    from mirl.agent.episode import run_episode
    from mirl.llm.client import LLMClient
    from mirl.prefixes.stage import run_prefixes
    from mirl.runner.inputs import profiled_trajectories
    from mirl.tasks import load_task
    from mirl.training.pivot import pivot_candidates

    root = tmp_path_factory.mktemp("train")
    where = write_task(root / "tasks" / "coin", test_sh=COIN, instruction="List the files in /app, then submit.\n")
    (where / "solution").mkdir()
    (where / "solution" / "solve.sh").write_text("#!/bin/bash\nls -la /app > /app/listing.txt\n")
    task = load_task(where)
    run = RunDir(root / "run")
    p = params()
    client = LLMClient(p.models, run_dir=run.root, stage="profiling")
    played, flagged = [], []
    def reference(x):  # a passed episode with a command whose prompts rebuild from its ids: pivots for PivotRL
        return bool(pivot_candidates([x]))

    # a reference needs a command (about half of SmolLM2's episodes hold one) and the coin's pass: about
    # one episode in four, so 60 tries all miss with chance (3/4)^60 = 3e-8; the loop stops at the first
    for seed in range(60):  # until two episodes of two steps (for prefixes) and a reference one
        t = run_episode(task, bwrap_sandbox, client.model("policy"), p.agent, seed=seed)
        played.append(t)
        if len(t.steps) >= 2 and t.exit_reason != "error" and len(flagged) < 2:
            flagged.append(t)
        if len(flagged) == 2 and any(reference(x) for x in played):
            break
    assert flagged, "SmolLM2 played no episode of two steps"
    assert any(reference(x) for x in played), f"none of {len(played)} episodes is a PivotRL reference"
    prof = run.stage_dir("profiling")
    prof.mkdir(parents=True, exist_ok=True)
    (prof / "trajectories.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in played))
    stored = profiled_trajectories(run)
    assert any(reference(x) for x in stored.values()), "the stored trajectories lost the PivotRL reference"
    errors = [ErrorStep(env=t.task, seed=t.seed, step=1, rejected_command=None, reason="r") for t in flagged]
    (prof / "error_steps.jsonl").write_text("".join(json.dumps(e.to_dict()) + "\n" for e in errors))
    (prof / "summary.json").write_text("{}")
    # the task pool later stages read, as the profiling stage stores it
    (prof / "params.json").write_text(json.dumps({"params": {"profiling": {"tasks": str(root / "tasks")}}}))
    kind = ErrorType(MISBEHAVIOR, "d", provenance="rules: broad-kill", status="kept")
    TaxonomyStore(run.stage_dir("taxonomy")).save(Taxonomy(types=[kind]), [Label(e.id, [MISBEHAVIOR]) for e in errors])
    (run.stage_dir("taxonomy") / "summary.json").write_text("{}")
    run_prefixes(p, run.root, sandbox=bwrap_sandbox, tasks=[task], progress=False)
    kept = read_jsonl(run.file("prefixes", "train.jsonl"))[0]
    assert kept, "no prefix reproduced"
    yield run, task, {(t.task, t.seed): t for t in played}
    shutil.rmtree(root, ignore_errors=True)  # gigabytes of checkpoints: not left for the rest of the suite


@pytest.mark.slow
@pytest.mark.timeout(2400)  # the module's fixture (up to 60 profiling episodes, the prefix check) counts here too
def test_a_few_mirl_steps_train_smollm2_and_resume_continues(prefixed_run, bwrap_sandbox, engine):
    run, task, profiled = prefixed_run
    base = {k: v.clone() for k, v in engine.model.state_dict().items()}
    try:
        check_training(run, task, profiled, bwrap_sandbox, engine, base)
    finally:  # the engine is the process's: later tests get the base weights back
        engine.update_weights(base)


def check_training(run, task, profiled, bwrap_sandbox, engine, base):
    from mirl.training.stage import run_training

    rows = []
    summary = run_training(params(), run.root, sandbox=bwrap_sandbox, tasks=[task], progress=False, on_step=rows.append)
    assert summary["done"] == 2 and summary["complete"] and summary["checkpoints"] == [1, 2]
    # what a process pays before its first step, by part (the device run's per-recipe start-up)
    assert set(summary["startup_s"]) == {"inputs", "engine", "player"}
    assert all(v >= 0 for v in summary["startup_s"].values()) and summary["startup_s"]["inputs"] > 0
    metrics = read_jsonl(run.file("training", "metrics.jsonl"))[0]
    assert [m["step"] for m in metrics] == [1, 2] and rows == metrics
    # a step fills its batch or stops at the cap on tries; a step whose every group was dead (all rewards
    # equal: likely with a 135M policy and the behavior reward) logs share 1 and trains on nothing
    for m in metrics:
        assert m["groups_live"] == 1 or m["groups_tried"] == 24
        assert m["dead_share"] == round(1 - (m["groups_live"] + m["groups_surplus"]) / m["groups_tried"], 4)
        assert (m.get("loss_tokens", 0) > 0) == (m["groups_live"] > 0)
    trained_steps = [m for m in metrics if m["groups_live"]]
    assert trained_steps == metrics, "a step found no live group in 24 tries (each group is live with chance 31/32)"
    assert all(m["loss_tokens"] > 0 and m["loss"] is not None for m in metrics)
    # the generator has the learner's weights at every step: their log-probabilities agree
    assert all(m["logprob_abs_diff"] < 1e-3 for m in trained_steps)
    # the generator got the learner's weights; the checkpoint holds them, in Hugging Face format
    moved = [k for k, v in engine.model.state_dict().items() if not torch.equal(v, base[k])]
    assert moved
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(run.file("training", "checkpoints") / "step-000002")
    name = moved[0]
    assert torch.allclose(saved.state_dict()[name], engine.model.state_dict()[name])

    rollouts = read_jsonl(run.file("training", "rollouts.jsonl"))[0]
    trained = [r for r in rollouts if r["trained"]]
    assert trained and all(r["reward"]["valid"] and r["live"] for r in trained)
    for m in metrics:  # a live group is in the batch (advantages) or surplus (played, never scored)
        draws = {}
        for r in rollouts:
            if r["step"] == m["step"]:
                draws.setdefault(r["draw"], []).append(r)
        live = [rs for rs in draws.values() if rs[0]["live"]]
        assert len(live) == m["groups_live"] + m["groups_surplus"] and len(draws) == m["groups_tried"]
        assert sum(any(r["trained"] for r in rs) for rs in live) == m["groups_live"]
        assert all(r["advantage"] is None for rs in live if not any(r["trained"] for r in rs) for r in rs)
    for r in trained:
        traj = Trajectory.from_dict(r["trajectory"])
        k = traj.prefix_len
        assert k == 1 and traj.steps[0].source == "prefix" and traj.steps[0].tokens == "context"
        # the prefix's tokens are exactly what the policy saw in profiling
        ref = profiled[(traj.task, int(r["start"].rsplit("/", 2)[1]))]
        ids = training_sequence(traj)[0]
        want = list(ref.prompt_ids) + ref.steps[0].completion_ids + ref.steps[0].observation_ids
        assert ids[:len(want)] == want

    # resume: more steps continue the count and the draw sequence from the last checkpoint
    # (and the top checkpoints are then scored on a validation task set, here the same task)
    summary = run_training(params(steps=3, validation_tasks=str(task.path.parent)), run.root, sandbox=bwrap_sandbox,
                           tasks=[task], progress=False)
    metrics = read_jsonl(run.file("training", "metrics.jsonl"))[0]
    assert [m["step"] for m in metrics] == [1, 2, 3] and summary["done"] == 3
    selection = json.loads(run.file("training", "selection.json").read_text())
    assert sorted(v["step"] for v in selection["validation"]) == [1, 2, 3]
    assert all(v["episodes"] == 1 for v in selection["validation"])
    best = max(selection["validation"], key=lambda v: (v["validation_reward"], v["smoothed_reward"]))
    assert summary["selected"] == selection["selected"] == best["step"]
    third = [r for r in read_jsonl(run.file("training", "rollouts.jsonl"))[0] if r["step"] == 3]
    assert min(r["draw"] for r in third) == metrics[1]["draws"]
    with pytest.raises(ParamsMismatch, match="training.lr"):
        run_training(params(steps=4, lr=1e-3), run.root, sandbox=bwrap_sandbox, tasks=[task], progress=False)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_notebook_04_trains_headless_and_plots(prefixed_run, tmp_path):
    import shutil

    from mirl.notebook import RunSpec, execute

    run, _, _ = prefixed_run
    repo = Path(__file__).resolve().parents[2]
    runs = tmp_path / "runs"
    shutil.copytree(run.root, runs / "t", ignore=shutil.ignore_patterns("training"))
    overrides = {"sandbox.backend": "bwrap", "training.steps": 1, "training.group_size": 3, "training.max_tries": 4,
                 "training.max_steps": 3, "models.policy.max_tokens": 40}
    spec = RunSpec(notebook=repo / "notebooks" / "04_training_launch.ipynb", run_name="t",
                   params_file=repo / "params" / "demo.yaml", overrides=overrides, runs_root=runs,
                   reports_root=tmp_path / "reports", cell_timeout_s=800)
    nb = json.loads(execute(spec).read_text())
    assert not [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    metrics = read_jsonl(runs / "t" / "training" / "metrics.jsonl")[0]
    assert [m["step"] for m in metrics] == [1]
    report = tmp_path / "reports" / "t"
    assert (report / "training_curves.png").stat().st_size > 5_000 and (report / "training_curves.pdf").exists()
    assert (report / "training_metrics.csv").read_text().startswith("step,")
    import pandas as pd

    starts = pd.read_csv(report / "training_starts.csv")  # one row per start drawn, every rollout counted
    rollouts = [r for r in read_jsonl(runs / "t" / "training" / "rollouts.jsonl")[0] if r["reward"].get("valid", True)]
    assert set(starts["start"]) == {r["start"] for r in rollouts}
    assert starts["rollouts"].sum() == len(rollouts) and starts["groups"].sum() == len({(r["step"], r["draw"]) for r in rollouts})


class Alternating:
    """A step judge double that says match, no match, match, ... whatever the action (SmolLM2's actions
    rarely match a reference step, and often hold no command at all)."""

    def __init__(self):
        self.calls = 0

    def same(self, context_steps, reference_step, action):
        self.calls += 1
        return self.calls % 2 == 1


SMOKE = {"models.policy.model": "local/smollm2", "models.policy.max_tokens": 40, "sandbox.backend": "bwrap",
         "agent.max_steps": 3, "training.steps": 1, "training.batch_size": 1, "training.group_size": 2,
         "step_profiling.actions": 2, "training.max_tries": 2, "training.max_steps": 3, "training.workers": 4,
         "training.rubric_writer": "reference", "training.rubric_judge": "rules", "training.pivot_judge": "difflib",
         "training.gradient_checkpointing": False, "training.micro_batch_tokens": 4096,
         "training.validation_tasks": ""}  # the paper's TB-Lite is not here


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("recipe", ["tmax-189", "rar", "pivotrl"])
def test_baseline_recipes_run_a_smoke_step(prefixed_run, bwrap_sandbox, engine, tmp_path, recipe, monkeypatch):
    import shutil

    from mirl.params import load
    from mirl.training.stage import run_training

    run, task, _ = prefixed_run
    copy = tmp_path / "run"
    shutil.copytree(run.root, copy, ignore=shutil.ignore_patterns("training"))
    repo = Path(__file__).resolve().parents[2]
    over = dict(SMOKE)
    if recipe == "pivotrl":  # a step judge that alternates, so that every candidate's two actions disagree
        over.update({"step_profiling.workers": 1, "training.workers": 1})
        monkeypatch.setattr("mirl.training.step_profiling.step_judge", lambda client, kind: Alternating())
    p = load(repo / "params" / "train" / f"{recipe}.yaml", over)
    assert p.training.recipe == recipe
    base = {k: v.clone() for k, v in engine.model.state_dict().items()}
    try:
        summary = run_training(p, copy, sandbox=bwrap_sandbox, tasks=[task], progress=False)
    finally:
        engine.update_weights(base)
    assert summary["done"] == 1
    rollouts = read_jsonl(copy / "training" / "rollouts.jsonl")[0]
    assert rollouts and all(r["step"] == 1 for r in rollouts)
    trajs = [Trajectory.from_dict(r["trajectory"]) for r in rollouts]
    if recipe == "pivotrl":  # step profiling ran first, and training starts at its pivots only
        assert all(t.exit_reason == "pivot" and len(t.steps) == 1 for t in trajs)
        pivots = {r["id"] for r in read_jsonl(copy / "step_profiling" / "pivots.jsonl")[0]}
        assert pivots and {r["start"] for r in rollouts} <= pivots
        assert all(t.meta["usage"]["calls"] == 1 and t.meta["usage"]["input_tokens"] > 0 for t in trajs)
    else:  # from step 0 of the environment, no prefix
        assert all(t.prefix_len == 0 and r["start"] == "coin|step0" for t, r in zip(trajs, rollouts))
    if recipe == "rar":
        assert (copy / "training" / "rubrics.jsonl").exists()
        rated = [r for r in rollouts if r["reward"]["valid"]]
        assert rated and all(1 <= r["reward"]["rating"] <= 10 for r in rated)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_gpu_budget_stops_training_before_a_step(prefixed_run, bwrap_sandbox, engine, tmp_path):
    """PivotRL's budget is GPU time: with more GPU hours recorded for the training stage than the budget,
    no step is taken and the summary says why (time on a CPU is not GPU time)."""
    import shutil

    from mirl.runner.devices import record_device_time
    from mirl.training.stage import run_training

    run, task, _ = prefixed_run
    copy = tmp_path / "run"
    shutil.copytree(run.root, copy, ignore=shutil.ignore_patterns("training"))
    record_device_time(copy, "training", 3600.0, device="cpu")  # an hour on a CPU: no GPU time
    record_device_time(copy, "training", 1800.0, device="NVIDIA A100-SXM4-80GB", count=2)  # one GPU hour
    summary = run_training(params(gpu_budget_hours=1.0), copy, sandbox=bwrap_sandbox, tasks=[task], progress=False)
    assert summary["done"] == 0 and summary["stopped"] == "GPU budget: stage training used 1.00 of 1 GPU hours"


def test_no_training_prefix_says_the_held_out_split_took_them_all(prefixed_run, bwrap_sandbox, tmp_path):
    """A small profiling run's few prefixes can all go to the held-out split (set aside first): the
    error names that split and the params that change it, not just 'no kept prefixes'."""
    import shutil

    from mirl.runner.stage import StageError
    from mirl.training.stage import run_training

    run, task, _ = prefixed_run
    copy = RunDir(tmp_path / "run")
    shutil.copytree(run.root, copy.root, ignore=shutil.ignore_patterns("training"))
    train, held = copy.file("prefixes", "train.jsonl"), copy.file("prefixes", "heldout.jsonl")
    n = len(read_jsonl(train)[0])
    held.write_text(train.read_text())
    train.write_text("")
    with pytest.raises(StageError, match=rf"held out all {n} kept prefixes .*prefixes\.heldout_per_misbehavior 0"):
        run_training(params(), copy.root, sandbox=bwrap_sandbox, tasks=[task], progress=False)
    held.write_text("")
    with pytest.raises(StageError, match="stage 03 kept no prefix"):
        run_training(params(), copy.root, sandbox=bwrap_sandbox, tasks=[task], progress=False)
