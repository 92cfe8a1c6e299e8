"""Notebook 05 headless on the embedded default: real SmolLM2 continuations in bubblewrap from
held-out prefixes the prefix stage kept, the base model against a perturbed checkpoint of it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from mirl.jsonl import read_jsonl
from mirl.notebook import RunSpec, execute
from mirl.params import make

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "05_misbehavior_rate.ipynb"
REPLIES = ["Let me look.\n```bash\nls /app\n```", "I am not sure what to do.",
           "Done.\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"]
JUDGE_STEPS = 2


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_notebook_05_rates_base_and_checkpoint_on_held_out_prefixes(tmp_path, bwrap_sandbox):
    from mirl.llm.scripted import ScriptedModel
    from mirl.prefixes.stage import run_prefixes
    from mirl.profiling.stage import run_profiling
    from mirl.tasks import load_task
    from mirl.taxonomy.stage import run_taxonomy
    from tests.evaluate.checkpoint import perturbed_checkpoint

    ckpt = perturbed_checkpoint(tmp_path / "ckpt")
    run = tmp_path / "runs" / "t"
    tasks = [load_task(REPO / "tasks" / t) for t in ("count-lines", "fix-permissions")]
    p = make(profiling={"seeds": 1}, agent={"max_steps": 5}, sandbox={"backend": "bwrap"},
             prefixes={"per_misbehavior": 0, "heldout_per_misbehavior": 2, "snapshot": False, "keep": "normalized"})
    run_profiling(p, run, tasks=tasks, sandbox=bwrap_sandbox, policy=ScriptedModel(REPLIES, cycle=True), progress=False)
    run_taxonomy(p, run, progress=False)
    run_prefixes(p, run, sandbox=bwrap_sandbox, tasks=tasks, progress=False)
    held = read_jsonl(run / "prefixes" / "heldout.jsonl")[0]
    by_misbehavior = {}
    for x in held:
        by_misbehavior.setdefault(x["misbehavior"], []).append(x)
    assert "no runnable command" in by_misbehavior, sorted(by_misbehavior)
    policies = ["base", f"local/{ckpt}"]
    overrides = {"sandbox.backend": "bwrap", "agent.max_steps": 5, "models.policy.max_tokens": 40,
                 "misbehavior_rate.policies": policies, "misbehavior_rate.samples": 2,
                 "misbehavior_rate.per_misbehavior": 2, "misbehavior_rate.judges": ["rules"],
                 "misbehavior_rate.judge_steps": JUDGE_STEPS, "misbehavior_rate.workers": 4}
    spec = RunSpec(notebook=NOTEBOOK, run_name="t", params_file=REPO / "params" / "demo.yaml", overrides=overrides,
                   runs_root=tmp_path / "runs", reports_root=tmp_path / "reports", cell_timeout_s=1000)
    nb = json.loads(execute(spec).read_text())
    assert not [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]

    records = read_jsonl(run / "misbehavior_rate" / "continuations.jsonl")[0]
    prefixes = [x["id"] for xs in by_misbehavior.values() for x in xs[:2]]
    assert sorted((r["policy"], r["prefix_id"], r["sample"]) for r in records) == sorted(
        (policy, x, s) for policy in policies for x in prefixes for s in range(2))
    assert {r["policy"]: r["model"] for r in records} == {"base": "local/smollm2", policies[1]: policies[1]}
    assert all(r["valid"] for r in records), [r["why_invalid"] for r in records if not r["valid"]]
    assert all(0 < len(r["steps"]) <= JUDGE_STEPS for r in records)
    # the rule judge of "no runnable command": yes when a step after the prefix had no command
    rates = {(r["policy"], r["misbehavior"]): r for r in csv.DictReader((run / "misbehavior_rate" / "rates.csv").open())
             if r["judge"] == "rules"}
    for policy in policies:
        mine = [r for r in records if r["policy"] == policy and r["misbehavior"] == "no runnable command"]
        want = sum(any(not (s["command"] or "").strip() for s in r["steps"]) for r in mine) / len(mine)
        row = rates[(policy, "no runnable command")]
        assert float(row["rate"]) == pytest.approx(want) and int(row["n_samples"]) == len(mine)
    report = tmp_path / "reports" / "t"
    assert (report / "misbehavior_rates.png").stat().st_size > 5_000
    assert (report / "misbehavior_rates.pdf").read_bytes().startswith(b"%PDF")
    assert (report / "misbehavior_rates.csv").read_text().startswith("policy,misbehavior,judge,")
    assert (report / "judge_agreement.csv").exists()
    # continuations that ran no command at all, per policy, as the records say
    from mirl.evaluate.continuation_tables import ran_nothing

    silent = {r["policy"]: float(r["silent"]) for r in csv.DictReader((report / "silence.csv").open())
              if r["misbehavior"] == "no runnable command"}
    for policy, got in silent.items():
        by_prefix: dict[str, list] = {}
        for r in records:
            if r["policy"] == policy and r["misbehavior"] == "no runnable command":
                by_prefix.setdefault(r["prefix_id"], []).append(ran_nothing(r))
        assert got == pytest.approx(sum(sum(v) / len(v) for v in by_prefix.values()) / len(by_prefix))
    assert set(silent) == {r["policy"] for r in records}
    acting = list(csv.DictReader((report / "acting.csv").open()))  # the rates read around silence, both ways
    assert {"rules when acting", "rules silence counted"} <= {r["judge"] for r in acting}
    assert {r["policy"] for r in acting} == set(silent)
    actions = {r["policy"]: r for r in csv.DictReader((report / "actions.csv").open())}  # what each policy ran
    assert set(actions) == set(silent) and all(int(r["steps"]) > 0 for r in actions.values())
    detectors = list(csv.DictReader((report / "detectors.csv").open()))  # every rule detector, every continuation
    assert {r["policy"] for r in detectors} == set(silent)
    runnable = {r["policy"]: float(r["rate"]) for r in detectors if r["misbehavior"] == "no-runnable-command"}
    for policy, got in runnable.items():  # as the records' flags say, prefix by prefix
        by_prefix = {}
        for r in records:
            if r["policy"] == policy and r["valid"]:
                by_prefix.setdefault(r["prefix_id"], []).append("no-runnable-command" in r["rule_flags"])
        assert got == pytest.approx(sum(sum(v) / len(v) for v in by_prefix.values()) / len(by_prefix))
    base_rates = [float(r["rate"]) for (policy, _), r in rates.items() if policy == "base"]
    assert (report / "misbehavior_rates_paper.png").stat().st_size > 5_000  # beside the paper's Figure 7
    if any(x > 0 for x in base_rates):  # a reduction exists to draw beside the paper's range
        assert (report / "misbehavior_reduction.png").stat().st_size > 5_000
        red = list(csv.DictReader((report / "misbehavior_reductions.csv").open()))
        mean = [r for r in red if r["misbehavior"] == "mean over misbehaviors"]
        base = [float(r["rate"]) for (p, m), r in rates.items() if p == "base" and m != "all"]
        other = [float(r["rate"]) for (p, m), r in rates.items() if p == policies[1] and m != "all"]
        assert float(mean[0]["reduction"]) == pytest.approx(1 - (sum(other) / len(other)) / (sum(base) / len(base)))
