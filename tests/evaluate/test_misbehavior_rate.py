"""The misbehavior-rate stage with scripted policies and judges in a fake sandbox: one row per
(policy, prefix, sample, judge), rates and kappa as derived by hand, resume by item key, held-out
prefixes only, and policy names resolved (base, selected, checkpoint directories)."""

from __future__ import annotations

import csv
import json
import math

import pytest
from agent_doubles import FakeSandbox

from mirl.jsonl import read_jsonl
from mirl.llm import scripted
from mirl.llm.scripted import ScriptedModel
from mirl.params import make
from mirl.runner.fingerprint import ParamsMismatch
from mirl.runner.stage import StageError
from tests.evaluate.rate_run import write_rate_run

COMMAND = "I will look.\n```bash\nls -la /app\n```"
NO_COMMAND = "I am not sure what to do."


def mixed(messages):
    """No command on the alpha task, a command on the beta task."""
    return NO_COMMAND if "(alpha)" in messages[1]["content"] else COMMAND


def contrarian(messages):
    """A judge that sees the misbehavior when a step had no command, and always on the beta task."""
    text = messages[-1]["content"] if len(messages) == 2 else messages[1]["content"]
    yes = "(no runnable command)" in text or "(beta)" in text
    return f"Thinking.\n<answer>{'yes' if yes else 'no'}</answer>"


@pytest.fixture
def models():
    made = [ScriptedModel([COMMAND], name="cmd", cycle=True), ScriptedModel(mixed, name="mixed"),
            ScriptedModel(contrarian, name="judge")]
    for m in made:
        scripted.register(m)
    yield {m.name: m for m in made}
    for m in made:
        scripted.unregister(m.name)


def params(**section):
    base = {"policies": ["scripted/cmd", "scripted/mixed"], "samples": 2, "judges": ["rules", "scripted/judge"],
            "judge_steps": 2, "workers": 2, "n_boot": 200}
    return make(agent={"max_steps": 10}, models={"cache": False},
                misbehavior_rate={**base, **section})


def run(p, run_dir, tasks, sandbox=None):
    from mirl.evaluate.misbehavior_rate import run_misbehavior_rate

    return run_misbehavior_rate(p, run_dir.root, sandbox=sandbox or FakeSandbox(), tasks=tasks, progress=False)


def rows(path):
    return list(csv.DictReader(path.open()))


def test_rates_and_kappa_per_policy_and_judge(tmp_path, models):
    run_dir, tasks = write_rate_run(tmp_path)
    summary = run(params(), run_dir, tasks)
    assert summary["complete"] and summary["planned"] == 2 * 2 * 2  # policies x prefixes x samples
    out = run_dir.stage_dir("misbehavior_rate")
    judged = rows(out / "judgments.csv")
    assert len(judged) == 8 * 2  # one row per continuation and judge
    records = read_jsonl(out / "continuations.jsonl")[0]
    # the policy played judge_steps steps after the one-step prefix, and nothing else
    assert all(len(r["steps"]) == 2 and all(s["source"] == "policy" for s in r["steps"]) for r in records)
    # each record says where its time went (the GPU benchmarks sum these per pass)
    assert all(r["timings"]["total_s"] > 0 and {"model_s", "sandbox_s", "restore_s", "verify_s", "own_s"} <= set(r["timings"])
               for r in records)
    # by hand: rules say yes only for mixed on alpha; the contrarian judge also for every beta continuation
    rates = {(r["policy"], r["misbehavior"], r["judge"]): r for r in rows(out / "rates.csv")}
    want = {("scripted/cmd", "rules"): 0.0, ("scripted/mixed", "rules"): 0.5,
            ("scripted/cmd", "llm:scripted/judge"): 0.5, ("scripted/mixed", "llm:scripted/judge"): 1.0}
    for (policy, judge), rate in want.items():
        for m in ("no runnable command", "all"):
            row = rates[(policy, m, judge)]
            assert float(row["rate"]) == rate and int(row["n_prefixes"]) == 2 and int(row["n_samples"]) == 4
    # 8 continuations: rules yes on 2, the LLM judge on 6; they agree on 4: p_o 1/2, p_e 3/8, kappa 0.2
    agreement = rows(out / "agreement.csv")
    assert {r["misbehavior"] for r in agreement} == {"no runnable command", "all"}
    for r in agreement:
        assert int(r["n_items"]) == 8 and float(r["agreement"]) == 0.5
        assert math.isclose(float(r["kappa"]), 0.2)
    assert summary["rate"]["scripted/mixed | rules"] == 0.5
    # each policy against the first: cmd never repeats under the rules, mixed on half -> cmd is the
    # reference, so mixed's "reduction" is 1 - 0.5 / 0 (undefined); under the LLM judge 1 - 1.0 / 0.5 = -100%
    reductions = {(r["policy"], r["misbehavior"], r["judge"]): r for r in rows(out / "reductions.csv")}
    assert set(reductions) == {("scripted/mixed", m, j) for m in ("no runnable command", "all")
                               for j in ("rules", "llm:scripted/judge")}
    llm = reductions[("scripted/mixed", "all", "llm:scripted/judge")]
    assert llm["reference"] == "scripted/cmd" and int(llm["prefixes"]) == 2
    assert float(llm["base_rate"]) == 0.5 and float(llm["rate"]) == 1.0 and float(llm["reduction"]) == -1.0
    assert not (out / "success.csv").exists()  # no tests ran (verify off)
    assert rows(out / "differences.csv") == []  # one policy after the first: no pair to compare
    # mixed ran no command at all on alpha (both samples), cmd always ran one: per prefix 1 and 0
    silence = {(r["policy"], r["misbehavior"]): float(r["silent"]) for r in rows(out / "silence.csv")}
    assert silence[("scripted/mixed", "all")] == 0.5 and silence[("scripted/cmd", "all")] == 0.0
    assert summary["silent"] == {"scripted/cmd": 0.0, "scripted/mixed": 0.5}
    # and the rates read around it: every judge, both readings, each policy
    acting = {(r["policy"], r["judge"]) for r in rows(out / "acting.csv") if r["misbehavior"] == "all"}
    assert acting == {(p, f"{j} {how}") for p in ("scripted/cmd", "scripted/mixed")
                      for j in ("rules", "llm:scripted/judge") for how in ("when acting", "silence counted")}
    # what each ran, pooled: mixed silent in its 4 alpha continuations of 8, cmd a command at every step
    actions = {r["policy"]: r for r in rows(out / "actions.csv")}
    assert float(actions["scripted/mixed"]["silent_share"]) == 0.5 and float(actions["scripted/cmd"]["ran_share"]) == 1.0
    assert int(actions["scripted/cmd"]["steps"]) == 4 * 2  # 4 continuations x 2 steps
    assert summary["cut_by_silence"] == []  # mixed's rates are above cmd's: no cut to explain
    assert summary["cut_by_failing_commands"] == []
    # every rule detector over every continuation, whatever its prefix's misbehavior: mixed's silence on alpha
    # is "no runnable command" there; both repeat `ls -la /app` unchanged after it succeeded wherever they act
    from mirl.detectors import get_detectors

    detectors = {(r["policy"], r["misbehavior"]): float(r["rate"]) for r in rows(out / "detectors.csv")}
    assert {m for _, m in detectors} == {d.name for d in get_detectors()}
    assert detectors[("scripted/mixed", "no-runnable-command")] == 0.5 and detectors[("scripted/cmd", "no-runnable-command")] == 0.0
    assert detectors[("scripted/cmd", "recheck-unchanged-after-success")] == 1.0
    assert detectors[("scripted/mixed", "recheck-unchanged-after-success")] == 0.5
    assert detectors[("scripted/cmd", "broad-kill")] == 0.0


def lenient(messages):
    """A judge that sees the misbehavior in every continuation that ran a command, never in a silent one."""
    text = messages[-1]["content"] if len(messages) == 2 else messages[1]["content"]
    return f"<answer>{'no' if '(no runnable command)' in text else 'yes'}</answer>"


def test_a_cut_made_of_silence_is_named_in_the_summary_and_a_warning(tmp_path, models, caplog):
    """Under a judge that a silent continuation satisfies, mixed (silent on alpha) repeats less than cmd, but
    not once its silence counts as not avoiding: the summary and the log say so."""
    judge = ScriptedModel(lenient, name="lenient")
    scripted.register(judge)
    try:
        run_dir, tasks = write_rate_run(tmp_path)
        with caplog.at_level("WARNING", logger="mirl.evaluate.misbehavior_rate"):
            summary = run(params(judges=["scripted/lenient"]), run_dir, tasks)
    finally:
        scripted.unregister("lenient")
    assert summary["rate"] == {"scripted/cmd | llm:scripted/lenient": 1.0, "scripted/mixed | llm:scripted/lenient": 0.5}
    assert summary["cut_by_silence"] == ["scripted/mixed | llm:scripted/lenient"]
    assert any("policy scripted/mixed" in r.getMessage() and "the cut is silence" in r.getMessage() for r in caplog.records)


def test_resume_plays_only_new_items_and_other_sampling_is_refused(tmp_path, models):
    run_dir, tasks = write_rate_run(tmp_path)
    run(params(samples=1, policies=["scripted/mixed"]), run_dir, tasks)
    first = len(models["mixed"].calls)
    assert first == 2 * 2  # two prefixes, two policy steps each
    summary = run(params(samples=2, policies=["scripted/mixed"]), run_dir, tasks)
    assert summary["skipped"] == 2 and summary["new"] == 2
    assert len(models["mixed"].calls) == 2 * first
    records = read_jsonl(run_dir.file("misbehavior_rate", "continuations.jsonl"))[0]
    assert sorted((r["prefix_id"].split("|")[1], r["sample"]) for r in records) == [
        ("alpha/0/1", 0), ("alpha/0/1", 1), ("beta/0/1", 0), ("beta/0/1", 1)]
    # fewer samples: the extra records stay on disk but out of the tables
    run(params(samples=1, policies=["scripted/mixed"]), run_dir, tasks)
    assert len(rows(run_dir.file("misbehavior_rate", "judgments.csv"))) == 2 * 2
    with pytest.raises(ParamsMismatch, match="temperature"):
        run(params(samples=2, policies=["scripted/mixed"], temperature=1.0), run_dir, tasks)


def test_a_prefix_that_does_not_reproduce_is_judged_by_none(tmp_path, models):
    run_dir, tasks = write_rate_run(tmp_path, recorded=lambda c: f"something else than {c}\n")
    run(params(policies=["scripted/mixed"]), run_dir, tasks)
    records = read_jsonl(run_dir.file("misbehavior_rate", "continuations.jsonl"))[0]
    assert records and not any(r["valid"] for r in records)
    assert all(r["why_invalid"].startswith("the prefix did not reproduce") for r in records)
    rates = rows(run_dir.file("misbehavior_rate", "rates.csv"))
    assert all(int(r["n_samples"]) == 0 and int(r["n_failed"]) == 4 and r["rate"] == "" for r in rates)


def test_a_judge_without_an_answer_is_a_failed_judgment(tmp_path, models):
    scripted.register(ScriptedModel(["no tag here"], name="mute", cycle=True))
    try:
        run_dir, tasks = write_rate_run(tmp_path, envs=("alpha",))
        run(params(policies=["scripted/mixed"], judges=["rules", "scripted/mute"]), run_dir, tasks)
    finally:
        scripted.unregister("mute")
    rates = {r["judge"]: r for r in rows(run_dir.file("misbehavior_rate", "rates.csv")) if r["misbehavior"] == "all"}
    assert int(rates["llm:scripted/mute"]["n_failed"]) == 2 and int(rates["llm:scripted/mute"]["n_samples"]) == 0
    assert float(rates["rules"]["rate"]) == 1.0 and int(rates["rules"]["n_failed"]) == 0


def test_held_out_prefixes_only_and_at_most_per_misbehavior(tmp_path, models):
    from mirl.evaluate.misbehavior_rate import MisbehaviorRateStage

    run_dir, tasks = write_rate_run(tmp_path)
    stage = MisbehaviorRateStage(params(per_misbehavior=1), run_dir, sandbox=FakeSandbox(), tasks=tasks)
    assert [p.env for p in stage.heldout()] == ["alpha"]
    assert {i.key[0] for i in stage.plan()} == {"scripted/cmd", "scripted/mixed"}
    plan = [i.key for i in stage.plan()]
    for cut in range(len(plan) + 1):  # a stage stopped after any item has compared the policies on the same draws
        policies = [k[0] for k in plan[:cut]]
        assert abs(policies.count("scripted/cmd") - policies.count("scripted/mixed")) <= 1
    assert [k[2] for k in plan] == sorted(k[2] for k in plan)  # sample-major: every prefix before a second draw
    leak_dir, tasks = write_rate_run(tmp_path / "leak", train_leak=True)
    stage = MisbehaviorRateStage(params(), leak_dir, sandbox=FakeSandbox(), tasks=tasks)
    with pytest.raises(StageError, match="training starts too"):
        stage.plan()


def test_policy_names_resolve_to_models(tmp_path):
    from mirl.evaluate.misbehavior_rate import MisbehaviorRateStage
    from mirl.evaluate.policies import resolve_all
    from mirl.runner.layout import RunDir

    run_dir = RunDir(tmp_path / "run")
    p = make(models={"policy": {"model": "hosted_vllm/base-model"}})
    # no training selection: `selected` is left out, `base` is models.policy.model
    assert resolve_all(["base", "selected", "scripted/x"], run_dir, p) == {
        "base": "hosted_vllm/base-model", "scripted/x": "scripted/x"}
    ckpt = run_dir.stage_dir("training") / "checkpoints" / "step-000002"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    (run_dir.stage_dir("training") / "selection.json").write_text(json.dumps({"top": [{"step": 2}, {"step": 1}]}))
    assert resolve_all(["selected"], run_dir, p) == {"selected": f"local/{ckpt}"}
    with pytest.raises(StageError, match="no config.json"):
        resolve_all([f"local/{tmp_path / 'nothing-here'}"], run_dir, p)
    # validation's pick among the top by smoothed reward is the one (the paper: best TB-Lite of the top 5)
    (run_dir.stage_dir("training") / "selection.json").write_text(
        json.dumps({"top": [{"step": 1}, {"step": 2}], "selected": 2}))
    assert resolve_all(["selected"], run_dir, p) == {"selected": f"local/{ckpt}"}
    (run_dir.stage_dir("training") / "selection.json").write_text(json.dumps({"top": [{"step": 7}]}))
    with pytest.raises(StageError, match="selects step 7"):
        resolve_all(["selected"], run_dir, p)
    # a record of `selected` made from another checkpoint is played again
    (run_dir.stage_dir("training") / "selection.json").write_text(json.dumps({"top": [{"step": 2}]}))
    stage = MisbehaviorRateStage(make(misbehavior_rate={"policies": ["selected"], "judges": ["rules"]}), run_dir)
    assert stage.redo({"policy": "selected", "model": "local/elsewhere/step-000001"})
    assert not stage.redo({"policy": "selected", "model": f"local/{ckpt}", "weights": stage.weights("selected")})
    assert stage.redo({"policy": "selected", "model": f"local/{ckpt}", "exit_reason": "error"})
    # the same step written anew (trained again): its weights differ, so the record is played again
    (ckpt / "model.safetensors").write_bytes(b"weights")
    fresh = MisbehaviorRateStage(make(misbehavior_rate={"policies": ["selected"], "judges": ["rules"]}), run_dir)
    assert fresh.redo({"policy": "selected", "model": f"local/{ckpt}", "weights": stage.weights("selected")})
    assert not fresh.redo({"policy": "selected", "model": f"local/{ckpt}", "weights": fresh.weights("selected")})


def test_a_run_copied_elsewhere_keeps_its_checkpoint_records(tmp_path):
    """Unpacking a run on another machine names its checkpoints by other paths; the weights are the same."""
    import shutil
    import subprocess

    from mirl.evaluate.misbehavior_rate import MisbehaviorRateStage
    from mirl.runner.layout import RunDir

    run_dir = RunDir(tmp_path / "a" / "run")
    ckpt = run_dir.stage_dir("training") / "checkpoints" / "step-000002"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    (ckpt / "model.safetensors").write_bytes(b"weights")
    (run_dir.stage_dir("training") / "selection.json").write_text(json.dumps({"top": [{"step": 2}]}))
    params = make(misbehavior_rate={"policies": ["selected"], "judges": ["rules"]})
    stage = MisbehaviorRateStage(params, run_dir)
    record = {"policy": "selected", "model": stage.policies()["selected"], "weights": stage.weights("selected")}
    (tmp_path / "b").mkdir()
    subprocess.run(["tar", "cf", str(tmp_path / "run.tar"), "-C", str(tmp_path / "a"), "run"], check=True)
    subprocess.run(["tar", "xf", str(tmp_path / "run.tar"), "-C", str(tmp_path / "b")], check=True)
    shutil.copytree(run_dir.root, tmp_path / "c" / "run")  # copy2: times kept
    for where in (tmp_path / "b" / "run", tmp_path / "c" / "run"):
        moved = MisbehaviorRateStage(params, RunDir(where))
        assert moved.policies()["selected"] != record["model"]
        assert not moved.redo(record)
    # the same place trained again (new weights, same path): played again
    (ckpt / "model.safetensors").write_bytes(b"other weights")
    assert MisbehaviorRateStage(params, run_dir).redo(record)


def test_verify_runs_the_tests_after_each_continuation_and_keeps_the_reward(tmp_path, models):
    run_dir, tasks = write_rate_run(tmp_path)
    plain = FakeSandbox(reward=0.25)
    run(params(policies=["scripted/cmd"]), run_dir, tasks, sandbox=plain)
    records = read_jsonl(run_dir.file("misbehavior_rate", "continuations.jsonl"))[0]
    assert records and all("reward" not in r for r in records)
    assert not any(getattr(s, "verified", False) for s in plain.sessions)
    checked = FakeSandbox(reward=0.25)
    other, tasks2 = write_rate_run(tmp_path / "v")
    run(params(policies=["scripted/cmd"], verify=True), other, tasks2, sandbox=checked)
    records = read_jsonl(other.file("misbehavior_rate", "continuations.jsonl"))[0]
    assert len(records) == 2 * 2 and all(r["reward"] == 0.25 for r in records)
    assert sum(getattr(s, "verified", False) for s in checked.sessions) == 4  # one test run per continuation
    # a reward of 0.25 is partial credit: no continuation counts as a success
    success = {r["misbehavior"]: r for r in rows(other.file("misbehavior_rate", "success.csv"))}
    assert set(success) == {"no runnable command", "all"}
    assert float(success["all"]["success"]) == 0.0 and int(success["all"]["n_samples"]) == 4


def test_a_further_judge_takes_its_own_settings_over_the_behavior_judges(tmp_path):
    """The paper's two judges: Gemini (models.behavior_judge, medium thinking) and Qwen3.8-27B served
    elsewhere with low-effort thinking: `judge_models` gives the second its server and effort."""
    from mirl.evaluate.misbehavior_rate import MisbehaviorRateStage

    qwen = "hosted_vllm/Qwen/Qwen3.8-27B"
    p = make(models={"behavior_judge": {"model": "gemini/gemini-3.8-flash", "extra": {"reasoning_effort": "medium"}}},
             misbehavior_rate={"judges": ["llm", qwen],
                               "judge_models": {qwen: {"api_base": "http://judge:8001/v1", "extra": {"reasoning_effort": "low"}}}})
    stage = MisbehaviorRateStage(p, tmp_path)
    second, first = stage.judge_config(qwen).behavior_judge, stage.judge_config("gemini/gemini-3.8-flash").behavior_judge
    assert (second.model, second.api_base, second.extra) == (qwen, "http://judge:8001/v1", {"reasoning_effort": "low"})
    assert (first.api_base, first.extra) == ("", {"reasoning_effort": "medium"})
    bad = make(misbehavior_rate={"judges": ["llm", qwen], "judge_models": {qwen: {"api_bsae": "x"}}})
    with pytest.raises(StageError, match="api_bsae"):
        MisbehaviorRateStage(bad, tmp_path).judge_config(qwen)
    with pytest.raises(StageError, match="judge_models: other/judge is not one of the judges"):
        MisbehaviorRateStage(make(misbehavior_rate={"judge_models": {"other/judge": {}}}), tmp_path)


def test_interleaved_takes_the_misbehaviors_in_turn():
    from mirl.evaluate.misbehavior_rate import interleaved
    from mirl.records.prefix import Prefix

    made = [Prefix(id=f"{m}|{k}", misbehavior=m, error_id=k, env="alpha", seed=0, steps=1)
            for k, m in [("1", "a"), ("2", "a"), ("3", "a"), ("4", "b"), ("5", "c")]]
    assert [p.id for p in interleaved(made)] == ["a|1", "b|4", "c|5", "a|2", "a|3"]


def test_progress_shows_failed_continuations_apart_from_the_rate(tmp_path, models):
    from mirl.evaluate.misbehavior_rate import MisbehaviorRateStage

    run_dir, tasks = write_rate_run(tmp_path)
    stage = MisbehaviorRateStage(params(), run_dir, sandbox=FakeSandbox(), tasks=tasks)
    broken = {"policy": "scripted/cmd", "exit_reason": "error", "judgments": [{"judge": "rules", "repeated": None}]}
    assert stage.progress(broken) == {"policy": "scripted/cmd", "repeated": "n/a", "failed": 1}
    judged = {"policy": "scripted/cmd", "exit_reason": "done", "judgments": [{"judge": "rules", "repeated": True}]}
    assert stage.progress(judged) == {"policy": "scripted/cmd", "repeated": "1.00", "failed": 1}
