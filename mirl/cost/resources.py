"""The resource table of a run, built from what its stages already record.

One row per thing that used resources, all with the same columns (`COLUMNS`), so any cut is a
filter and any total a sum:

    source    where the row comes from
      rollout   one episode: profiling/trajectories.jsonl, training/rollouts.jsonl (or, without it,
                one row per step of training/metrics.jsonl); one candidate step of PivotRL's step
                profiling (step_profiling/candidates.jsonl), its sampled actions as one-step rollouts
      llm       LLM calls of one (stage, role, model, step) from the LLM ledger (llm_calls.jsonl)
      check     one prefix re-run of the prefix stage (sandbox time)
      wall      a stage's wall time (summary.json), per step for training (metrics.jsonl step_s)
      device    device time (device_time.jsonl, `mirl.runner.devices`), or the wall time of a stage
                times the devices `hardware` declares for it when the stage recorded none

A run counts the preprocessing its training recipe uses (`charged_stages`, as the paper's cost table
does): error profiling for MiRL and its ablations, step profiling for PivotRL, none for TMax-189 and
RaR+ (whose rubric writing is preprocessing by role); a run without training counts every stage.

Every row carries its stage, its phase (`phase_of`) and, for training, the step it belongs to, so
"up to the chosen checkpoint" is `step <= N` on training rows (preprocessing rows have no step).
Training's LLM calls carry no step in the ledger; they are placed by time: before the end of the
first step (metrics `time`, else a checkpoint's `state.json` time) that ends after them; calls after
the last known time belong to the last step.

Policy tokens come from the rollouts of the stages that store them (each turn's usage), and from the
ledger's policy rows for any other stage; the ledger's policy rows are kept for call counts either way
(their tokens in the llm_* columns), so nothing is counted twice in policy_*. API fees (api_usd) are the
ledger's costs of every role but the policy, which is priced by the paper's rule (`mirl.cost.totals`).
"""

from __future__ import annotations

import bisect
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mirl.jsonl import iter_jsonl
from mirl.llm.ledger import read_ledger
from mirl.llm.pricing import cost_usd
from mirl.runner.devices import read_device_time
from mirl.runner.inputs import trajectories_path
from mirl.runner.layout import SUMMARY, RunDir

log = logging.getLogger(__name__)

COLUMNS = ["run", "stage", "phase", "step", "source", "role", "model", "price", "device", "env", "start",
           "rollouts", "policy_calls", "policy_input_tokens", "policy_cached_input_tokens", "policy_output_tokens",
           "llm_calls", "llm_input_tokens", "llm_cached_input_tokens", "llm_output_tokens", "api_usd",
           "device_s", "wall_s", "sandbox_s"]
AMOUNTS = COLUMNS[COLUMNS.index("rollouts"):]
PREPROCESSING, RL, EVALUATION = "preprocessing", "rl", "evaluation"
STAGE_PHASES = {"profiling": PREPROCESSING, "taxonomy": PREPROCESSING, "prefixes": PREPROCESSING,
                "step_profiling": PREPROCESSING, "training": RL, "misbehavior": EVALUATION, "misbehavior_rate": EVALUATION, "passk": EVALUATION,
                "evaluation": EVALUATION}
PREPROCESSING_ROLES = ("rubric_writer",)  # rubrics are written once, before RL, though by the training stage
TRAINING = "training"


ERROR_PROFILING = ("profiling", "taxonomy", "prefixes")  # MiRL's preprocessing: what prefix and env starts need


def phase_of(stage: str, role: str | None = None) -> str:
    """preprocessing (profiling, taxonomy, prefix check, step profiling, rubric writing), rl (training),
    evaluation, or other."""
    if role in PREPROCESSING_ROLES:
        return PREPROCESSING
    return STAGE_PHASES.get(stage, "other")


def _row(run: str, stage: str, source: str, **values: Any) -> dict[str, Any]:
    row = dict.fromkeys(COLUMNS)
    row.update({k: 0 for k in AMOUNTS})
    row.update(run=run, stage=stage, source=source, phase=phase_of(stage, values.get("role")))
    row.update(values)
    return row


def _usage(traj: Mapping[str, Any]) -> dict[str, int]:
    u = (traj.get("meta") or {}).get("usage") or {}
    return {"policy_calls": int(u.get("calls", 0) or 0), "policy_input_tokens": int(u.get("input_tokens", 0) or 0),
            "policy_cached_input_tokens": int(u.get("cached_input_tokens", 0) or 0),
            "policy_output_tokens": int(u.get("output_tokens", 0) or 0)}


def _sandbox_s(traj: Mapping[str, Any]) -> float:
    t = traj.get("timings") or {}
    return float(sum(float(t.get(k, 0) or 0) for k in ("sandbox_s", "verify_s", "restore_s")))


def profiling_rows(run: RunDir) -> list[dict[str, Any]]:
    rows = []
    for traj in iter_jsonl(trajectories_path(run)):
        rows.append(_row(run.name, "profiling", "rollout", env=traj.get("task"), start="env", rollouts=1,
                         sandbox_s=_sandbox_s(traj), **_usage(traj)))
    return rows


def training_start(run: RunDir) -> str:
    """The recipe's start point (prefix, env, random, pivot) from the params the stage stored."""
    try:
        stored = json.loads(run.params(TRAINING).read_text())
        return str(stored["params"]["training"]["start"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def training_rows(run: RunDir) -> list[dict[str, Any]]:
    """One row per rollout tried (rollouts.jsonl), else one per step (metrics.jsonl, no cached split)."""
    start = training_start(run)
    rows = []
    for r in iter_jsonl(run.file(TRAINING, "rollouts.jsonl")):
        traj = r.get("trajectory") or {}
        rows.append(_row(run.name, TRAINING, "rollout", step=int(r["step"]), env=traj.get("task"), start=start,
                         rollouts=1, sandbox_s=_sandbox_s(traj), **_usage(traj)))
    if rows:
        return rows
    for m in metrics(run):
        rows.append(_row(run.name, TRAINING, "rollout", step=int(m["step"]), start=start,
                         rollouts=int(m.get("rollouts", 0) or 0),
                         policy_input_tokens=int(m.get("policy_input_tokens", 0) or 0),
                         policy_output_tokens=int(m.get("policy_output_tokens", 0) or 0)))
    return rows


def step_profiling_rows(run: RunDir) -> list[dict[str, Any]]:
    """PivotRL's step profiling: one row per candidate step, its sampled actions as one-step rollouts (one
    policy call each, the candidate's prompt as input)."""
    rows = []
    for r in iter_jsonl(run.file("step_profiling", "candidates.jsonl")):
        out = [int(x) for x in r.get("completion_tokens") or []]
        rows.append(_row(run.name, "step_profiling", "rollout", env=r.get("task"), start="pivot", rollouts=len(out),
                         policy_calls=len(out), policy_input_tokens=len(out) * int(r.get("prompt_tokens", 0) or 0),
                         policy_output_tokens=sum(out)))
    return rows


def charged_stages(run: RunDir) -> set[str] | None:
    """The preprocessing stages a run's training recipe depends on, which its cost counts: error profiling
    (profiling, taxonomy, prefixes) for prefix and env starts, step profiling for PivotRL, none for starts
    at step 0 of drawn environments (TMax-189, RaR+; RaR+'s rubric writing is in its training stage).
    None (every stage) for a run without a training stage."""
    start = training_start(run)
    if not start:
        return None
    extra = {"prefix": set(ERROR_PROFILING), "env": set(ERROR_PROFILING), "pivot": {"step_profiling"}}.get(start, set())
    return {s for s, ph in STAGE_PHASES.items() if ph != PREPROCESSING} | extra


def metrics(run: RunDir) -> list[dict[str, Any]]:
    return list(iter_jsonl(run.file(TRAINING, "metrics.jsonl")))


def prefix_rows(run: RunDir) -> list[dict[str, Any]]:
    rows = []
    for p in iter_jsonl(run.file("prefixes", "prefixes.jsonl")):
        restore = p.get("restore") or {}
        seconds = float(restore.get("rerun_s", 0) or 0) + float(restore.get("restore_s", 0) or 0)
        rows.append(_row(run.name, "prefixes", "check", env=p.get("env"), sandbox_s=seconds))
    return rows


def step_ends(run: RunDir) -> list[tuple[float, int]]:
    """(time, step) at which training steps ended, oldest first: metrics rows with a `time`, else the
    checkpoints' state times."""
    ends = [(float(m["time"]), int(m["step"])) for m in metrics(run) if m.get("time") is not None]
    if not ends:
        for state in sorted(run.file(TRAINING, "checkpoints").glob("step-*/state.json")):
            try:
                s = json.loads(state.read_text())
                ends.append((float(s["time"]), int(s.get("step") or state.parent.name.split("-")[1])))
            except (OSError, ValueError, KeyError, IndexError):
                continue
    return sorted(ends)


def place_in_steps(times: list[float], ends: list[tuple[float, int]], last_step: int | None) -> list[int | None]:
    """The training step of each time: the first step that ended at or after it; past the last known
    end, the run's last step (None when no step is known)."""
    bounds = [t for t, _ in ends]
    out: list[int | None] = []
    for t in times:
        i = bisect.bisect_left(bounds, t)
        out.append(ends[i][1] if i < len(ends) else (last_step if last_step is not None else
                                                   (ends[-1][1] if ends else None)))
    return out


def _price_lookup(model: str, prices: Mapping[str, Any]) -> str | None:
    if model in prices:
        return model
    tail = str(model).rsplit("/", 1)[-1]
    return tail if tail in prices else None


def llm_rows(run: RunDir, prices: Mapping[str, Any] | None = None, rates: Mapping[str, float] | None = None,
             policy_stages: set[str] = frozenset()) -> list[dict[str, Any]]:
    """The ledger grouped by (stage, role, model, price source, step). A row the ledger could not price
    (price=none) is priced here when `prices` has its model (exactly, or by its last path part:
    `hosted_vllm/Qwen/Qwen3.8-27B` -> `Qwen3.8-27B`), marked price=params. `policy_stages`: stages whose
    policy tokens the rollouts hold (their ledger policy tokens stay in llm_* only)."""
    df = read_ledger(run.root)
    if df.empty:
        return []
    prices = dict(prices or {})
    df = df.copy()
    for c in ("n", "input_tokens", "cached_input_tokens", "output_tokens", "cost_usd"):
        df[c] = df[c].fillna(0)
    df["stage"] = df["stage"].fillna("").astype(str)
    df["role"] = df["role"].fillna("").astype(str)
    df["price"] = df["price"].fillna("none").astype(str)
    df["step"] = None
    train = df["stage"] == TRAINING
    if train.any():
        steps = [int(m["step"]) for m in metrics(run)]
        df.loc[train, "step"] = place_in_steps(df.loc[train, "time"].astype(float).tolist(), step_ends(run),
                                               max(steps) if steps else None)
    if prices:
        for i in df.index[(df["price"] == "none") & ~df["cache_hit"].fillna(False).astype(bool)]:
            key = _price_lookup(df.at[i, "model"], prices)
            if key is not None:
                df.at[i, "cost_usd"], _ = cost_usd(key, int(df.at[i, "input_tokens"]),
                                                   int(df.at[i, "cached_input_tokens"]),
                                                   int(df.at[i, "output_tokens"]), dict(prices), dict(rates or {}))
                df.at[i, "price"] = "params"
    rows = []
    keys = ["stage", "role", "model", "price", "step"]
    for (stage, role, model, price, step), g in df.groupby(keys, dropna=False, sort=True):
        step = None if step is None or step != step else int(step)
        tokens = (int(g["input_tokens"].sum()), int(g["cached_input_tokens"].sum()), int(g["output_tokens"].sum()))
        row = _row(run.name, stage, "llm", role=role, model=model, price=price, step=step,
                   llm_calls=int((~g["cache_hit"].fillna(False).astype(bool)).sum()),
                   llm_input_tokens=tokens[0], llm_cached_input_tokens=tokens[1], llm_output_tokens=tokens[2],
                   wall_s=0.0, api_usd=0.0 if role == "policy" else float(g["cost_usd"].sum()))
        if role == "policy" and stage not in policy_stages:
            row.update(policy_calls=row["llm_calls"], policy_input_tokens=tokens[0],
                       policy_cached_input_tokens=tokens[1], policy_output_tokens=tokens[2])
        rows.append(row)
    return rows


def wall_rows(run: RunDir) -> list[dict[str, Any]]:
    """Each finished stage's wall time; training's per step (step_s), its set-up outside steps as step 0."""
    rows = []
    for summary in sorted(run.root.glob(f"*/{SUMMARY}")):
        stage = summary.parent.name
        try:
            elapsed = float(json.loads(summary.read_text()).get("elapsed_s") or 0)
        except (OSError, ValueError, AttributeError):
            log.warning("%s: not a readable summary; its wall time is left out", summary)
            continue
        if stage != TRAINING:
            rows.append(_row(run.name, stage, "wall", wall_s=elapsed))
    ms = metrics(run)
    in_steps = 0.0
    for m in ms:
        seconds = float(m.get("step_s", 0) or 0)
        in_steps += seconds
        rows.append(_row(run.name, TRAINING, "wall", step=int(m["step"]), wall_s=seconds))
    summary = run.summary(TRAINING)
    if ms and summary.exists():
        elapsed = float(json.loads(summary.read_text()).get("elapsed_s") or 0)
        if elapsed > in_steps:
            rows.append(_row(run.name, TRAINING, "wall", step=0, wall_s=elapsed - in_steps))
    return rows


def device_rows(run: RunDir, walls: list[dict[str, Any]],
                hardware: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Recorded device time, plus wall time x declared devices for stages that recorded none."""
    rows = []
    recorded = set()
    for d in read_device_time(run.root):
        stage = str(d.get("stage", ""))
        recorded.add(stage)
        rows.append(_row(run.name, stage, "device", step=d.get("step"), device=d.get("device"),
                         device_s=float(d.get("seconds", 0)) * int(d.get("count", 1) or 1)))
    for stage, hw in (hardware or {}).items():
        if stage in recorded:
            continue
        kind, count = str(hw.get("kind", "gpu")), int(hw.get("count", 1))
        for w in walls:
            if w["stage"] == stage:
                rows.append(_row(run.name, stage, "device", step=w["step"], device=kind,
                                 device_s=w["wall_s"] * count))
    return rows


def resources(run_dir: str | Path, prices: Mapping[str, Any] | None = None, rates: Mapping[str, float] | None = None,
              hardware: Mapping[str, Mapping[str, Any]] | None = None):
    """The resource table of one run (a pandas DataFrame with `COLUMNS`)."""
    import pandas as pd

    run = RunDir(run_dir)
    if not run.root.is_dir():
        raise FileNotFoundError(f"{run.root}: no such run directory")
    rollouts = profiling_rows(run) + step_profiling_rows(run) + training_rows(run)
    walls = wall_rows(run)
    rows = (rollouts + llm_rows(run, prices, rates, policy_stages={r["stage"] for r in rollouts})
            + prefix_rows(run) + walls + device_rows(run, walls, hardware))
    charged = charged_stages(run)
    if charged is not None:
        left = sorted({r["stage"] for r in rows if r["phase"] == PREPROCESSING and r["stage"] not in charged})
        if left:
            log.info("%s: its %s recipe does not use %s: not counted", run.name, training_start(run), ", ".join(left))
        rows = [r for r in rows if r["phase"] != PREPROCESSING or r["stage"] in charged]
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["step"] = df["step"].astype("Int64")
    for c in AMOUNTS:
        df[c] = pd.to_numeric(df[c]).fillna(0)
    return df
