"""Small runs written in code with the stages' own writers and record shapes (ledger rows through the
real `Ledger`, trajectories as `Trajectory.to_dict`, training's metrics, rollouts, checkpoints' state
and selection as the training stage writes them); the numbers are chosen so totals are easy by hand."""

from __future__ import annotations

import json
from pathlib import Path

from mirl.llm.ledger import Ledger
from mirl.records.trajectory import Step, Trajectory

T0 = 1_800_000_000.0


def trajectory(task: str, seed: int, calls: int, inp: int, cached: int, out: int, sandbox_s: float,
               prefix_len: int = 0) -> dict:
    steps = [Step(reasoning="r", command="ls", source="policy") for _ in range(prefix_len + calls)]
    t = Trajectory(task=task, seed=seed, models={"policy": "local/smollm2"}, steps=steps, prefix_len=prefix_len,
                   timings={"model_s": 1.0, "sandbox_s": sandbox_s, "verify_s": 0.5, "restore_s": 0.0},
                   meta={"usage": {"calls": calls, "input_tokens": inp, "cached_input_tokens": cached,
                                   "output_tokens": out, "cost_usd": 0.0}})
    return t.to_dict()


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _summary(run: Path, stage: str, elapsed: float, **extra) -> None:
    (run / stage).mkdir(parents=True, exist_ok=True)
    (run / stage / "summary.json").write_text(json.dumps({"stage": stage, "elapsed_s": elapsed, **extra}))


def preprocessing_run(run: Path) -> Path:
    """Profiling of 2 environments (3 episodes), a taxonomy by an LLM annotator, two prefix checks.

    Policy: 3 episodes, 2 + 4 + 6 = 12 calls, input 1000 + 3000 + 5000 = 9000 (cached 6000), output 600.
    Localizer: 12 calls on a priced model, $0.01 each; annotator: 3 calls on a model the ledger could
    not price (price=none), 10k input / 2k output tokens each; one cache hit of the localizer."""
    ledger = Ledger(run / "llm_calls.jsonl")
    eps = [("env-a", 0, 2, 1000, 500, 100, 2.0), ("env-a", 1, 4, 3000, 2000, 200, 3.0),
           ("env-b", 0, 6, 5000, 3500, 300, 5.0)]
    _jsonl(run / "profiling" / "trajectories.jsonl", [trajectory(*e) for e in eps])
    for _, _, calls, inp, cached, out, _ in eps:
        for _ in range(calls):
            ledger.record(time=T0, role="policy", stage="profiling", model="local/smollm2",
                          input_tokens=inp // calls, cached_input_tokens=cached // calls,
                          output_tokens=out // calls, price="none")
            ledger.record(time=T0, role="localizer", stage="profiling", model="gemini/gemini-3.8-flash",
                          input_tokens=800, output_tokens=50, cost_usd=0.01, price="table")
    ledger.record(time=T0, role="localizer", stage="profiling", model="gemini/gemini-3.8-flash", cache_hit=True,
                  price="cache")
    for _ in range(3):
        ledger.record(time=T0 + 10, role="annotator", stage="taxonomy", model="hosted_vllm/Qwen/Qwen3.8-27B",
                      input_tokens=10_000, output_tokens=2_000, price="none")
    _jsonl(run / "prefixes" / "prefixes.jsonl", [
        {"id": "m|env-a/0/1", "env": "env-a", "restore": {"rerun_s": 1.5, "restore_s": 0.5}},
        {"id": "m|env-c/0/1", "env": "env-c", "restore": {"rerun_s": 2.0, "restore_s": 0.0}}])
    _summary(run, "profiling", 100.0)
    _summary(run, "taxonomy", 20.0)
    _summary(run, "prefixes", 30.0)
    return run


def training_run(run: Path, with_time: bool = False) -> Path:
    """`preprocessing_run` then 3 training steps from prefixes, 2 rollouts each, checkpoints at steps
    1, 2, 3 (state times T0+100, +200, +300), the best by smoothed reward step 2.

    Step s: rollouts on env-a and env-d, each 3 calls, input 300*s (cached 200*s), output 30*s;
    a behavior judge (priced $0.02 per call) called twice per step, at T0+100*s-50; a rubric
    writer called once at T0+1, before the first step; step_s 40 + s."""
    preprocessing_run(run)
    ledger = Ledger(run / "llm_calls.jsonl")
    ledger.record(time=T0 + 1, role="rubric_writer", stage="training", model="anthropic/claude-opus-5",
                  input_tokens=1000, output_tokens=500, cost_usd=0.5, price="table")
    rollouts, metrics = [], []
    for s in (1, 2, 3):
        for env in ("env-a", "env-d"):
            rollouts.append({"step": s, "draw": 0, "live": True, "advantage": 0.0, "trained": True,
                             "trajectory": trajectory(env, s, 3, 300 * s, 200 * s, 30 * s, 1.0, prefix_len=1)})
            for _ in range(3):
                ledger.record(time=T0 + 100 * s - 60, role="policy", stage="training", model="local/smollm2",
                              input_tokens=100 * s, cached_input_tokens=0, output_tokens=10 * s, price="none")
        for _ in range(2):
            ledger.record(time=T0 + 100 * s - 50, role="behavior_judge", stage="training",
                          model="gemini/gemini-3.8-flash", input_tokens=500, output_tokens=20, cost_usd=0.02,
                          price="table")
        row = {"step": s, "reward": [0.1, 0.9, 0.2][s - 1], "rollouts": 2, "policy_input_tokens": 600 * s,
               "policy_output_tokens": 60 * s, "step_s": 40.0 + s, "learner_s": 10.0}
        if with_time:
            row["time"] = T0 + 100 * s
        metrics.append(row)
        state = run / "training" / "checkpoints" / f"step-{s:06d}" / "state.json"
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(json.dumps({"draws": 2 * s, "recipe": "mirl", "time": T0 + 100 * s, "step": s}))
    _jsonl(run / "training" / "rollouts.jsonl", rollouts)
    _jsonl(run / "training" / "metrics.jsonl", metrics)
    (run / "training" / "selection.json").write_text(json.dumps({"top": [{"step": 2}, {"step": 3}, {"step": 1}]}))
    (run / "training" / "params.json").write_text(json.dumps({"params": {"training": {"start": "prefix"}}}))
    _summary(run, "training", 200.0)
    return run
