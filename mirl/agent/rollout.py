"""Many episodes in parallel, written to `<out>/trajectories.jsonl`, resumable after a kill.

A (task, seed) pair is finished when a complete record for it is in the file; a rerun plays only
the missing pairs, so a killed run loses at most its in-flight episodes and never duplicates one.
The work runs on the common stage runner (`mirl.runner`): local threads or, with `ray_address`,
Ray tasks, collected by one loop that is the only writer of the file; the run remembers the params
that made it and refuses to mix in others.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mirl.agent.config import AgentConfig
from mirl.agent.episode import run_episode
from mirl.agent.hooks import StepHook
from mirl.llm.config import LLMConfig
from mirl.records.trajectory import Trajectory
from mirl.runner.executor import ExecutorError
from mirl.runner.stage import Item, Stage, run_stage
from mirl.sandbox.base import SandboxConfig
from mirl.tasks import Task

log = logging.getLogger(__name__)

TRAJECTORIES = "trajectories.jsonl"


class RolloutError(ValueError):
    """Bad rollout input (no tasks, invalid tasks, missing optional package); the message says what to do."""


@dataclass
class RolloutConfig:
    """What to roll out, where, and how wide."""

    tasks: list[str] = field(default_factory=lambda: ["tasks"], metadata={
        "help": "task directories, or directories holding task directories; `!<task id>` leaves that task out"})
    task_ids: list[str] = field(default_factory=list, metadata={"help": "only these task ids; empty: all found"})
    model: str = field(default="", metadata={
        "help": "policy model name, e.g. local/smollm2 or hosted_vllm/<id>; empty: llm.policy.model"})
    seeds: int = field(default=2, metadata={"min": 1, "help": "episodes per task, with seeds first_seed .. first_seed+seeds-1"})
    first_seed: int = field(default=0, metadata={"help": "the first seed"})
    out: str = field(default="runs/rollout", metadata={"help": "run directory; trajectories go to trajectories.jsonl"})
    ledger_dir: str = field(default="", metadata={
        "help": "where the LLM ledger (llm_calls.jsonl) and cache live; empty: `out`. Stages point it at runs/<name>"})
    stage: str = field(default="rollout", metadata={"help": "stage name written on every LLM ledger row"})
    workers: int = field(default=1, metadata={"min": 1, "help": "episodes played at once (threads, or Ray tasks in flight)"})
    ray_address: str | None = field(default=None, metadata={
        "help": "Ray cluster address (e.g. auto or ray://host:10001); empty: local threads. Task paths must "
                "be readable on the Ray workers"})
    retry_errors: bool = field(default=False, metadata={
        "help": "replay pairs whose record ended in exit_reason=error (their old records are removed)"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    agent: AgentConfig = field(default_factory=AgentConfig, metadata={"help": "the agent loop's settings"})
    sandbox: SandboxConfig = field(default_factory=SandboxConfig, metadata={"help": "how sandboxes are made"})
    llm: LLMConfig = field(default_factory=LLMConfig, metadata={"help": "models per role, cache, retries, budget"})

    def llm_config(self) -> LLMConfig:
        import copy

        cfg = copy.deepcopy(self.llm)
        if self.model:
            cfg.policy.model = self.model
        return cfg


@dataclass
class RolloutResult:
    path: Path
    planned: int  # pairs asked for
    skipped: int  # already finished before this run
    new: list[Trajectory] = field(default_factory=list)
    stopped: str | None = None  # why the run is not complete (a budget, every episode failed), else None

    def summary(self) -> dict[str, Any]:
        rewards = [t.reward for t in self.new if t.reward is not None]
        return {"path": str(self.path), "planned": self.planned, "skipped": self.skipped, "played": len(self.new),
                "exit_reasons": dict(Counter(t.exit_reason for t in self.new)),
                "mean_reward": round(sum(rewards) / len(rewards), 4) if rewards else None, "stopped": self.stopped}


def load_tasks(config: RolloutConfig) -> list[Task]:
    """The tasks under `config.tasks`; an entry `!<task id>` leaves that task out (e.g. one whose set-up
    needs a tool a machine lacks), and an id it names must be among the tasks found."""
    from mirl.tasks import TaskInvalid, find_tasks, load_task, without_tasks

    where = [p for p in config.tasks if not p.startswith("!")]
    left_out = {p[1:].strip() for p in config.tasks if p.startswith("!")}
    missing = [p for p in where if not Path(p).exists()]
    if missing:
        raise RolloutError(f"no such task path(s): {', '.join(missing)}")
    empty = without_tasks(*where)
    if empty:
        raise RolloutError(f"no task directories found in {', '.join(empty)} (a task directory has task.toml, "
                           "task.yaml or instruction.md)")
    paths = find_tasks(*where)
    tasks, problems = [], []
    for p in paths:
        try:
            tasks.append(load_task(p))
        except TaskInvalid as e:
            problems.append(str(e))
    if problems:
        raise RolloutError("invalid task(s); fix them or leave them out (see `mirl tasks validate`):\n"
                           + "\n".join(problems))
    unknown = sorted(left_out - {t.id for t in tasks})
    if unknown:
        raise RolloutError(f"task id(s) to leave out not found under {', '.join(where)}: {', '.join(unknown)}")
    tasks = [t for t in tasks if t.id not in left_out]
    if config.task_ids:
        unknown = sorted(set(config.task_ids) - {t.id for t in tasks})
        if unknown:
            raise RolloutError(f"task id(s) not found under {', '.join(where)}: {', '.join(unknown)}")
        tasks = [t for t in tasks if t.id in set(config.task_ids)]
    if not tasks:
        raise RolloutError(f"no task directories found in {', '.join(where)}"
                           + (f" (leaving out {', '.join(sorted(left_out))})" if left_out else ""))
    return tasks


class RolloutStage(Stage):
    """Plain policy rollouts on the common runner: one record per (task, seed) in `<out>/trajectories.jsonl`."""

    name = "rollout"
    directory = ""  # records go straight into `out`
    records = TRAJECTORIES
    key_fields = ("task", "seed")

    def __init__(self, config: RolloutConfig, tasks: list[Task], model=None, sandbox=None,
                 hook_factory: Callable[[], StepHook] | None = None,
                 progress_fields: Callable[[Trajectory], dict[str, Any]] | None = None):
        super().__init__(config, config.out)
        self.config = config
        self._tasks = {t.id: t for t in tasks}
        self._model, self._sandbox = model, sandbox
        self.hook_factory = hook_factory
        self.progress_fields = progress_fields
        self.new: list[Trajectory] = []
        self._lock = threading.Lock()

    def __getstate__(self):  # what travels to a Ray worker: no live model, sandbox or lock
        state = dict(self.__dict__)
        state.update(_model=None, _sandbox=None, _lock=None, progress_fields=None, new=[])
        return state

    @property
    def workers(self) -> int:
        return self.config.workers

    @property
    def ray_address(self) -> str:
        return self.config.ray_address or ""

    def fingerprint(self) -> dict[str, Any]:
        llm = self.config.llm_config()
        policy = getattr(self._model, "name", None) or llm.policy.model
        return {"models": {"policy": {**role_fingerprint(llm, "policy"), "model": policy}},
                "agent": asdict(self.config.agent), "sandbox": sandbox_fingerprint(self.config.sandbox),
                "tasks": sorted(self._tasks), "seeds": [self.config.first_seed, self.config.seeds]}

    def plan(self) -> list[Item]:
        seeds = range(self.config.first_seed, self.config.first_seed + self.config.seeds)
        return [Item((t.id, s), (str(t.path), t.id, s)) for t in self._tasks.values() for s in seeds]

    def redo(self, record: dict[str, Any]) -> bool:
        return self.config.retry_errors and record.get("exit_reason") == "error"

    def replay_hint(self) -> str:
        return "" if self.config.retry_errors else "run again with --retry-errors to play them again"

    def warm_up(self) -> None:
        self.resources()

    def resources(self):
        """The model and sandbox of this process (built once: loading a model is costly)."""
        if self._lock is None:
            self._lock = threading.Lock()
        with self._lock:
            if self._model is None or self._sandbox is None:
                model, sandbox = _worker_resources(json.dumps(asdict(self.config), default=str))
                self._model = self._model or model
                self._sandbox = self._sandbox or sandbox
            return self._model, self._sandbox

    def task(self, path: str, task_id: str) -> Task:
        from mirl.tasks import load_task

        if task_id not in self._tasks:
            self._tasks[task_id] = load_task(path)
        return self._tasks[task_id]

    def run_item(self, payload) -> dict[str, Any]:
        path, task_id, seed = payload
        model, sandbox = self.resources()
        hook = self.hook_factory() if self.hook_factory else None
        return run_episode(self.task(path, task_id), sandbox, model, self.config.agent, seed=seed, hook=hook).to_dict()

    def progress(self, record: dict[str, Any]) -> dict[str, Any]:
        traj = Trajectory.from_dict(record)
        self.new.append(traj)
        rewards = [t.reward for t in self.new if t.reward is not None]
        fields = {"reward": f"{sum(rewards) / len(rewards):.2f}" if rewards else "-", "last": traj.exit_reason}
        if self.progress_fields:
            fields.update(self.progress_fields(traj))
        return fields


def role_fingerprint(llm: LLMConfig, role: str) -> dict[str, Any]:
    """What of a role's settings changes its answers (not where it is served or how long it may take)."""
    rc = llm.role(role)
    return {"model": rc.model, "temperature": llm.temperature(role), "top_p": rc.top_p, "max_tokens": rc.max_tokens,
            "seed": rc.seed, "extra": rc.extra}


def sandbox_fingerprint(config: SandboxConfig) -> dict[str, Any]:
    out = {"backend": config.backend, "output_limit": config.output_limit, "allow_internet": config.allow_internet,
           "base_image": config.base_image}
    if config.reward_key != "mean":  # only when set, so runs recorded before the field existed still resume
        out["reward_key"] = config.reward_key
    return out


_WORKER_CACHE: dict[str, Any] = {}
_WORKER_LOCK = threading.Lock()


def _worker_resources(config_json: str):
    """The model and sandbox of this process for a config (built once per process)."""
    with _WORKER_LOCK:
        if config_json not in _WORKER_CACHE:
            from mirl.llm.client import LLMClient
            from mirl.sandbox.select import make_sandbox
            from mirl.typed import build

            config = build(RolloutConfig, json.loads(config_json))
            client = LLMClient(config.llm_config(), run_dir=config.ledger_dir or config.out, stage=config.stage)
            _WORKER_CACHE[config_json] = (client.model("policy"), make_sandbox(config.sandbox))
        return _WORKER_CACHE[config_json]


# --- the loop ---------------------------------------------------------------------------------------


def run_rollouts(
    config: RolloutConfig,
    tasks: list[Task] | None = None,
    model=None,
    sandbox=None,
    hook_factory: Callable[[], StepHook] | None = None,
    progress_fields: Callable[[Trajectory], dict[str, Any]] | None = None,
    force: bool = False,
) -> RolloutResult:
    """Play every missing (task, seed) pair of `config`; `model`/`sandbox` override the configured ones.

    `progress_fields(trajectory)` adds a caller's own numbers to the progress bar after each episode."""
    tasks = tasks if tasks is not None else load_tasks(config)
    stage = RolloutStage(config, tasks, model=model, sandbox=sandbox, hook_factory=hook_factory,
                         progress_fields=progress_fields)
    try:
        summary = run_stage(stage, force=force, progress=config.progress)
    except ExecutorError as e:
        raise RolloutError(str(e)) from None
    (Path(config.out) / "rollout_config.json").write_text(json.dumps(asdict(config), indent=2, default=str))
    return RolloutResult(path=stage.records_path, planned=summary["planned"], skipped=summary["skipped"],
                         new=stage.new, stopped=summary.get("stopped"))
