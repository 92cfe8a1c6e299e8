"""The profiling stage on the common runner: plan (task, seed) episodes, play one with the
localizer/teacher hook, finalize into the error-step table.

Output under `runs/<name>/profiling/`:
  trajectories.jsonl   one finished episode per line (append-only; the resume point)
  error_steps.jsonl    one row per flagged step, derived from the trajectories (rewritten whole)
  params.json          the params that made it (a resume with other ones is refused)
  summary.json         steps, flags, flag rate, discards, rewards, and LLM calls per role
The LLM ledger of every call is `runs/<name>/llm_calls.jsonl`.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from mirl.agent.episode import run_episode
from mirl.agent.rollout import RolloutError, role_fingerprint, sandbox_fingerprint
from mirl.jsonl import read_jsonl
from mirl.llm.config import LLMConfig
from mirl.profiling.hook import ProfilingHook, flag_of
from mirl.records.error_step import ErrorStep
from mirl.records.loaders import ERROR_STEPS
from mirl.records.trajectory import Trajectory
from mirl.roles.localizer import EitherLocalizer, LLMLocalizer, RuleLocalizer
from mirl.roles.teacher import LLMTeacher, ReferenceTeacherAdapter
from mirl.runner.inputs import TRAJECTORIES
from mirl.runner.layout import RunDir, atomic_write_jsonl
from mirl.runner.stage import Item, Stage, run_stage, stage_budgets
from mirl.tasks import Task

if TYPE_CHECKING:
    from mirl.params import Params

log = logging.getLogger(__name__)
STAGE = "profiling"

_PROCESS: dict[str, Any] = {}  # per-process LLM client and sandbox, keyed by run and params
_PROCESS_LOCK = threading.Lock()


class ProfilingStage(Stage):
    name = STAGE
    records = TRAJECTORIES
    key_fields = ("task", "seed")
    derived = (ERROR_STEPS,)

    def __init__(self, params: Params, run_dir, tasks: list[Task] | None = None, sandbox=None, policy=None):
        super().__init__(params, run_dir)
        self._tasks = tasks
        self._sandbox, self._policy = sandbox, policy
        self.steps = self.flags = 0

    def __getstate__(self):  # what travels to a Ray worker: params and task paths, no live objects
        state = dict(self.__dict__)
        if state["_sandbox"] is not None or state["_policy"] is not None:
            raise RolloutError("a sandbox or policy object given to the stage cannot travel to Ray workers; "
                               "leave ray_address empty, or configure them in params")
        state["_tasks"] = None
        return state

    # --- what the stage depends on ----------------------------------------------------------------

    def llm_config(self) -> LLMConfig:
        return replace(self.params.models, stage_budget_usd=stage_budgets(self.params))

    def role_models(self) -> dict[str, str]:
        p, m = self.params.profiling, self.params.models
        return {"localizer": {"rules": "rules", "llm": m.localizer.model, "both": f"rules+{m.localizer.model}"}[p.localizer],
                "teacher": "reference-solution" if p.teacher == "reference" else m.teacher.model}

    def tasks(self) -> list[Task]:
        if self._tasks is None:
            from mirl.agent.rollout import RolloutConfig, load_tasks

            p = self.params.profiling
            tasks = load_tasks(RolloutConfig(tasks=[t.strip() for t in p.tasks.split(",") if t.strip()]))
            if p.max_tasks > 0 and p.task_order == "random":
                from mirl.tasks.draw import draw

                drawn = set(draw([t.id for t in tasks], p.max_tasks, p.task_seed))
                tasks = sorted((t for t in tasks if t.id in drawn), key=lambda t: t.id)
            elif p.max_tasks > 0:
                tasks = sorted(tasks, key=lambda t: t.id)[: p.max_tasks]
            self._tasks = tasks
        return self._tasks

    def fingerprint(self) -> dict[str, Any]:
        p, llm = self.params.profiling, self.llm_config()
        models = {"policy": role_fingerprint(llm, "policy")}
        if self._policy is not None:
            models["policy"]["model"] = getattr(self._policy, "name", type(self._policy).__name__)
        if p.localizer != "rules":
            models["localizer"] = role_fingerprint(llm, "localizer")
        if p.teacher == "llm":
            models["teacher"] = role_fingerprint(llm, "teacher")
        return {"models": models, "agent": asdict(self.params.agent),
                "sandbox": sandbox_fingerprint(self.params.sandbox),
                "profiling": {"tasks": sorted(t.id for t in self.tasks()), "seeds": p.seeds,
                              "localizer": p.localizer, "teacher": p.teacher, "teacher_tries": p.teacher_tries}}

    def plan(self) -> list[Item]:
        tasks = self.tasks()
        if self.params.profiling.teacher == "reference":
            missing = [t.id for t in tasks if t.solution is None]
            if missing:
                log.warning("no reference solution for %d task(s) (%s...): flagged steps there are discarded",
                            len(missing), ", ".join(missing[:3]))
        return [Item((t.id, s), (str(t.path), t.id, s)) for t in tasks for s in range(self.params.profiling.seeds)]

    def redo(self, record: dict[str, Any]) -> bool:
        return record.get("exit_reason") == "error"  # a broken sandbox or model: play it again

    # --- one episode -------------------------------------------------------------------------------

    def warm_up(self) -> None:
        self._process_resources()

    def _process_resources(self):
        """(LLM client, sandbox) of this process, built once (a model load or image build is costly)."""
        import json

        from mirl.llm.client import LLMClient
        from mirl.sandbox.select import make_sandbox

        key = json.dumps([str(self.run.root), asdict(self.params)], sort_keys=True, default=str)
        with _PROCESS_LOCK:
            if key not in _PROCESS:
                client = LLMClient(self.llm_config(), run_dir=self.run.root, stage=STAGE)
                sandbox = self._sandbox or make_sandbox(self.params.sandbox)
                _PROCESS[key] = (client, sandbox)
            return _PROCESS[key]

    def hook(self, client) -> ProfilingHook:
        p = self.params.profiling
        judges: list[Any] = []
        if p.localizer in ("rules", "both"):
            judges.append(RuleLocalizer())
        if p.localizer in ("llm", "both"):
            judges.append(LLMLocalizer(client))
        localizer = judges[0] if len(judges) == 1 else EitherLocalizer(judges)
        teacher = (ReferenceTeacherAdapter() if p.teacher == "reference"
                   else LLMTeacher(client, self.params.agent.action_format))
        return ProfilingHook(localizer, teacher, tries=p.teacher_tries, models=self.role_models())

    def run_item(self, payload) -> dict[str, Any]:
        from mirl.tasks import load_task

        path, task_id, seed = payload
        client, sandbox = self._process_resources()
        if self._sandbox is not None:
            sandbox = self._sandbox
        task = next((t for t in self._tasks or [] if t.id == task_id), None) or load_task(path)
        policy = self._policy or client.model("policy")
        return run_episode(task, sandbox, policy, self.params.agent, seed=seed, hook=self.hook(client)).to_dict()

    # --- reporting ---------------------------------------------------------------------------------

    def progress(self, record: dict[str, Any]) -> dict[str, Any]:
        from mirl.llm.ledger import open_ledger

        self.steps += len(record.get("steps", [])) - record.get("prefix_len", 0)
        self.flags += len(error_rows([record]))
        return {"steps": self.steps, "flags/step": f"{self.flags / max(self.steps, 1):.2f}",
                "spend": f"${open_ledger(self.run.root).spent(STAGE):.2f}", "last": record.get("exit_reason")}

    def finalize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        rows = error_rows(records)
        atomic_write_jsonl(self.out / ERROR_STEPS, rows)
        return summarize(records, rows)


def run_profiling(params: Params, run_dir: str | Path, tasks=None, sandbox=None, policy=None,
                  force: bool = False, progress: bool = True) -> dict[str, Any]:
    """Play every missing (task, seed) episode with the hook, then rewrite error steps and summary."""
    return run_stage(ProfilingStage(params, run_dir, tasks=tasks, sandbox=sandbox, policy=policy),
                     force=force, progress=progress)


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
            rows.append(ErrorStep(
                env=t["task"], seed=t["seed"], step=index,
                prefix={"file": TRAJECTORIES, "task": t["task"], "seed": t["seed"], "steps": index},
                rejected_command=flag.get("rejected_command"), description=flag.get("description", ""),
                reason=flag.get("reason", ""), source=flag.get("source", ""),
                detectors=[f["source"] for f in flag.get("flags") or []],
                correction=flag.get("correction"), outcome="corrected" if flag.get("correction") else "discarded",
                attempts=len(flag.get("attempts") or []),
            ).to_dict())
    return rows


def summarize(trajectories: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    steps = sum(len(t.get("steps", [])) - t.get("prefix_len", 0) for t in trajectories)
    rewards = [t["reward"] for t in trajectories if t.get("reward") is not None]
    return {
        "episodes": len(trajectories), "environments": len({t["task"] for t in trajectories}),
        "steps": steps, "flags": len(rows), "flag_rate": round(len(rows) / steps, 4) if steps else 0.0,
        "discarded": sum(t.get("exit_reason") == "discarded" for t in trajectories),
        "exit_reasons": dict(Counter(t.get("exit_reason", "") for t in trajectories)),
        "mean_reward": round(sum(rewards) / len(rewards), 4) if rewards else None,
        "flags_by_source": dict(Counter(d for r in rows for d in (r["detectors"] or [r["source"]]))),
    }


def error_steps_table(run_dir: str | Path) -> pd.DataFrame:
    """The stage's error steps as stored, one row each (the notebook's table); the records themselves
    come from `mirl.records.load_error_steps`."""
    rows, _ = read_jsonl(RunDir(run_dir).file(STAGE, ERROR_STEPS))
    return pd.DataFrame(rows)


def load_trajectories(run_dir: str | Path) -> list[dict[str, Any]]:
    rows, _ = read_jsonl(RunDir(run_dir).file(STAGE, TRAJECTORIES))
    return rows


def as_trajectories(records: list[dict[str, Any]]) -> list[Trajectory]:
    return [Trajectory.from_dict(r) for r in records]
