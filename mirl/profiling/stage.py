"""Run the profiling stage: episodes with the localizer/teacher hook, then the error-step table.

Output under `runs/<name>/profiling/`:
  trajectories.jsonl   one finished episode per line (append-only; the resume point)
  error_steps.jsonl    one row per flagged step, derived from the trajectories (rewritten whole)
  summary.json         steps, flags, flag rate, discards, tokens and cost per role; `unfinished`:
                       episodes a budget stopped (their records are replayed by the next run)
  llm_calls.jsonl      the ledger of every LLM call (in the run directory)
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from mirl.agent.config import AgentConfig
from mirl.agent.rollout import STOPPED, RolloutConfig, run_rollouts
from mirl.jsonl import read_jsonl
from mirl.llm.config import LLMConfig, RoleConfig
from mirl.profiling.config import ProfilingParams
from mirl.profiling.hook import ProfilingHook, flag_of
from mirl.profiling.localizer import EitherLocalizer, LLMLocalizer, RuleLocalizer
from mirl.profiling.teacher import LLMTeacher, ReferenceTeacherAdapter
from mirl.sandbox.base import SandboxConfig

log = logging.getLogger(__name__)
STAGE = "profiling"


def llm_config(p: ProfilingParams) -> LLMConfig:
    role = dict(temperature=p.role_temperature, api_base=p.roles_api_base, api_key_env=p.api_key_env)
    cfg = LLMConfig(
        policy=RoleConfig(model=p.policy_model, temperature=p.policy_temperature, api_base=p.policy_api_base,
                          max_tokens=p.policy_max_tokens, api_key_env=p.api_key_env if p.policy_api_base else ""),
        localizer=RoleConfig(model=p.localizer_model or p.policy_model, max_tokens=512, **role),
        teacher=RoleConfig(model=p.teacher_model or p.policy_model, max_tokens=768, **role),
    )
    if p.budget_usd > 0:
        cfg.stage_budget_usd = {STAGE: p.budget_usd}
    return cfg


def rollout_config(p: ProfilingParams, run_dir: Path) -> RolloutConfig:
    tasks = [t.strip() for t in p.tasks.split(",") if t.strip()]
    return RolloutConfig(
        tasks=tasks, seeds=p.seeds, out=str(run_dir / STAGE), ledger_dir=str(run_dir), stage=STAGE,
        workers=p.workers, ray_address=p.ray_address or None,
        retry_errors=True, model=p.policy_model, llm=llm_config(p),
        agent=AgentConfig(action_format=p.action_format, max_steps=p.max_steps, command_timeout_s=p.command_timeout_s,
                          temperature=p.policy_temperature, max_output_tokens=p.policy_max_tokens),
        sandbox=SandboxConfig(backend=p.sandbox, command_timeout_s=p.command_timeout_s),
    )


_CLIENTS: dict[tuple[str, str], Any] = {}


class HookFactory:
    """Makes one ProfilingHook per episode. Picklable (no live client inside), so Ray workers can use it:
    each process builds its own LLM client for the run on first use."""

    def __init__(self, p: ProfilingParams, llm: LLMConfig, run_dir: str | Path):
        if p.localizer in ("llm", "both") and not p.localizer_model:
            raise ValueError("localizer=llm|both needs localizer_model (a litellm model name)")
        if p.teacher == "llm" and not p.teacher_model:
            raise ValueError("teacher=llm needs teacher_model (a litellm model name)")
        self.p, self.llm, self.run_dir = p, llm, str(run_dir)
        self.models = {"localizer": {"rules": "rules", "llm": p.localizer_model,
                                     "both": f"rules+{p.localizer_model}"}[p.localizer],
                       "teacher": "reference-solution" if p.teacher == "reference" else p.teacher_model}

    def client(self) -> Any:
        from mirl.llm.client import LLMClient

        key = (self.run_dir, json.dumps(asdict(self.llm), sort_keys=True, default=str))
        if key not in _CLIENTS:
            _CLIENTS[key] = LLMClient(self.llm, run_dir=self.run_dir, stage=STAGE)
        return _CLIENTS[key]

    def __call__(self) -> ProfilingHook:
        p = self.p
        judges = []
        if p.localizer in ("rules", "both"):
            judges.append(RuleLocalizer())
        if p.localizer in ("llm", "both"):
            judges.append(LLMLocalizer(self.client()))
        localizer = judges[0] if len(judges) == 1 else EitherLocalizer(judges)
        teacher = ReferenceTeacherAdapter() if p.teacher == "reference" else LLMTeacher(self.client(), p.action_format)
        return ProfilingHook(localizer, teacher, tries=p.teacher_tries, models=self.models)


def run_profiling(p: ProfilingParams, run_dir: str | Path, tasks=None, sandbox=None, policy=None) -> dict[str, Any]:
    """Play every missing (task, seed) episode with the hook, then rewrite error steps and summary."""
    from mirl.agent.rollout import load_tasks

    run_dir = Path(run_dir)
    cfg = rollout_config(p, run_dir)
    factory = HookFactory(p, cfg.llm, run_dir)
    client = factory.client()
    if tasks is None:
        tasks = load_tasks(cfg)
        if p.max_tasks > 0:
            tasks = sorted(tasks, key=lambda t: t.id)[: p.max_tasks]
    if p.teacher == "reference":
        missing = [t.id for t in tasks if t.solution is None]
        if missing:
            log.warning("no reference solution for %d task(s) (%s...): flagged steps there are discarded",
                        len(missing), ", ".join(missing[:3]))
    run_rollouts(cfg, tasks=tasks, model=policy or client.model("policy"), sandbox=sandbox, hook_factory=factory,
                 progress_fields=ProgressFields(run_dir))
    return write_outputs(run_dir)


class ProgressFields:
    """Steps, flags per step and spend so far, for the episode progress bar."""

    def __init__(self, run_dir: Path):
        self.run_dir, self.steps, self.flags = run_dir, 0, 0

    def __call__(self, traj) -> dict[str, Any]:
        from mirl.llm.ledger import open_ledger

        self.steps += len(traj.steps) - traj.prefix_len
        self.flags += len(error_rows([traj.to_dict()]))
        return {"steps": self.steps, "flags/step": f"{self.flags / max(self.steps, 1):.2f}",
                "spend": f"${open_ledger(self.run_dir).spent(STAGE):.2f}"}


def error_rows(trajectories: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per flagged step, from finished trajectories (accepted corrections and discards)."""
    rows = []
    for t in trajectories:
        found = [(i, flag_of(s)) for i, s in enumerate(t.get("steps", []))]
        discarded = (t.get("meta") or {}).get("discarded_step")
        if discarded:
            found.append((len(t.get("steps", [])), flag_of(discarded)))
        for index, flag in found:
            if not flag:
                continue
            rows.append({
                "env": t["task"], "seed": t["seed"], "step": index,
                "prefix": {"file": "trajectories.jsonl", "task": t["task"], "seed": t["seed"], "steps": index},
                "rejected_command": flag.get("rejected_command"), "description": flag.get("description", ""),
                "reason": flag.get("reason", ""), "source": flag.get("source", ""),
                "detectors": [f["source"] for f in flag.get("flags") or []],
                "correction": flag.get("correction"), "outcome": "corrected" if flag.get("correction") else "discarded",
                "attempts": len(flag.get("attempts") or []),
            })
    return rows


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_outputs(run_dir: str | Path) -> dict[str, Any]:
    out = Path(run_dir) / STAGE
    records, _ = read_jsonl(out / "trajectories.jsonl")
    trajectories = [t for t in records if t.get("exit_reason") != STOPPED]  # a budget stopped the others
    rows = error_rows(trajectories)
    _atomic_write(out / "error_steps.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    summary = summarize(trajectories, rows, Path(run_dir))
    summary["unfinished"] = len(records) - len(trajectories)
    _atomic_write(out / "summary.json", json.dumps(summary, indent=2))
    return summary


def summarize(trajectories: list[dict[str, Any]], rows: list[dict[str, Any]], run_dir: Path) -> dict[str, Any]:
    steps = sum(len(t.get("steps", [])) - t.get("prefix_len", 0) for t in trajectories)
    rewards = [t["reward"] for t in trajectories if t.get("reward") is not None]
    summary: dict[str, Any] = {
        "episodes": len(trajectories), "environments": len({t["task"] for t in trajectories}),
        "steps": steps, "flags": len(rows), "flag_rate": round(len(rows) / steps, 4) if steps else 0.0,
        "discarded": sum(t.get("exit_reason") == "discarded" for t in trajectories),
        "exit_reasons": dict(Counter(t.get("exit_reason", "") for t in trajectories)),
        "mean_reward": round(sum(rewards) / len(rewards), 4) if rewards else None,
        "flags_by_source": dict(Counter(d for r in rows for d in (r["detectors"] or [r["source"]]))),
    }
    ledger = run_dir / "llm_calls.jsonl"
    if ledger.exists():
        calls, _ = read_jsonl(ledger)
        df = pd.DataFrame(calls)
        if not df.empty and "role" in df:
            df = df[df.get("stage", STAGE) == STAGE] if "stage" in df else df
            cols = [c for c in ("input_tokens", "cached_input_tokens", "output_tokens", "cost_usd") if c in df]
            per_role = df.groupby("role")[cols].sum()
            per_role["calls"] = df.groupby("role").size()
            summary["per_role"] = {r: {k: float(v) for k, v in row.items()} for r, row in per_role.iterrows()}
    return summary


def load_error_steps(run_dir: str | Path) -> pd.DataFrame:
    rows, _ = read_jsonl(Path(run_dir) / STAGE / "error_steps.jsonl")
    return pd.DataFrame(rows)


def load_trajectories(run_dir: str | Path) -> list[dict[str, Any]]:
    rows, _ = read_jsonl(Path(run_dir) / STAGE / "trajectories.jsonl")
    return rows
