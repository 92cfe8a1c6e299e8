"""Many episodes in parallel, written to `<out>/trajectories.jsonl`, resumable after a kill.

A (task, seed) pair is finished when a complete record for it is in the file; a rerun plays only
the missing pairs, so a killed run loses at most its in-flight episodes and never duplicates one.
Episodes run on local threads or, with `ray_address`, as Ray tasks: both are submitted as
futures and collected by the same loop, which is the only writer of the file.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mirl.agent.config import AgentConfig
from mirl.agent.episode import run_episode
from mirl.agent.hooks import StepHook
from mirl.agent.trajectory import Trajectory
from mirl.jsonl import JsonlWriter, read_jsonl
from mirl.llm.config import LLMConfig
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
        "help": "task directories, or directories holding task directories"})
    task_ids: list[str] = field(default_factory=list, metadata={"help": "only these task ids; empty: all found"})
    model: str = field(default="", metadata={
        "help": "policy model name, e.g. local/smollm2 or hosted_vllm/<id>; empty: llm.policy.model"})
    seeds: int = field(default=2, metadata={"help": "episodes per task, with seeds first_seed .. first_seed+seeds-1"})
    first_seed: int = field(default=0, metadata={"help": "the first seed"})
    out: str = field(default="runs/rollout", metadata={"help": "run directory; trajectories go to trajectories.jsonl"})
    ledger_dir: str = field(default="", metadata={
        "help": "where the LLM ledger (llm_calls.jsonl) and cache live; empty: `out`. Stages point it at runs/<name>"})
    stage: str = field(default="rollout", metadata={"help": "stage name written on every LLM ledger row"})
    workers: int = field(default=1, metadata={"help": "episodes played at once (threads, or Ray tasks in flight)"})
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
    write_s: float = 0.0  # time spent appending records (fsync included): the runner's own cost
    stopped: int = 0  # episodes a spend cap interrupted (recorded with exit_reason "budget")

    def summary(self) -> dict[str, Any]:
        rewards = [t.reward for t in self.new if t.reward is not None]
        return {"path": str(self.path), "planned": self.planned, "skipped": self.skipped, "played": len(self.new),
                "exit_reasons": dict(Counter(t.exit_reason for t in self.new)),
                "mean_reward": round(sum(rewards) / len(rewards), 4) if rewards else None}


def load_tasks(config: RolloutConfig) -> list[Task]:
    from mirl.tasks import TaskInvalid, find_tasks, load_task

    missing = [p for p in config.tasks if not Path(p).exists()]
    if missing:
        raise RolloutError(f"no such task path(s): {', '.join(missing)}")
    paths = find_tasks(*config.tasks)
    tasks, problems = [], []
    for p in paths:
        try:
            tasks.append(load_task(p))
        except TaskInvalid as e:
            problems.append(str(e))
    if problems:
        raise RolloutError("invalid task(s); fix them or leave them out (see `mirl tasks validate`):\n"
                           + "\n".join(problems))
    if config.task_ids:
        unknown = sorted(set(config.task_ids) - {t.id for t in tasks})
        if unknown:
            raise RolloutError(f"task id(s) not found under {', '.join(config.tasks)}: {', '.join(unknown)}")
        tasks = [t for t in tasks if t.id in set(config.task_ids)]
    if not tasks:
        raise RolloutError(f"no task directories found in {', '.join(config.tasks)}")
    return tasks


STOPPED = "budget"  # exit reason of an episode a spend cap interrupted: unfinished, the next run plays it again


def stopped_by_budget(traj: Trajectory) -> bool:
    from mirl.llm.errors import BudgetExceeded

    return traj.exit_reason == "error" and (traj.error or "").startswith(f"{BudgetExceeded.__name__}:")


def finished_pairs(path: Path, retry_errors: bool = False) -> set[tuple[str, int]]:
    """Keys with a complete record; records of episodes a budget stopped (and, with `retry_errors`,
    error records) are first removed from the file, so they are played again."""
    records, report = read_jsonl(path)
    drop = {STOPPED, "error"} if retry_errors else {STOPPED}
    if any(r.get("exit_reason") in drop for r in records):
        keep = [r for r in records if r.get("exit_reason") not in drop]
        tmp = path.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for r in keep:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        log.info("removed %d unfinished record(s) from %s to replay them", len(records) - len(keep), path)
        records = keep
    if report.torn_tail:
        log.warning("%s: the last record was cut off by a kill; its episode will be played again", path)
    return {(r.get("task"), r.get("seed")) for r in records if "task" in r and "seed" in r}


# --- executors: threads here, Ray tasks there; both hand back concurrent futures -------------------


_WORKER_CACHE: dict[str, Any] = {}
_WORKER_LOCK = threading.Lock()


def _worker_resources(config_json: str):
    """The model and sandbox of this process for a config (built once: loading a model is costly)."""
    with _WORKER_LOCK:
        if config_json not in _WORKER_CACHE:
            from mirl.config import build
            from mirl.llm.client import LLMClient
            from mirl.sandbox.select import make_sandbox

            config = build(RolloutConfig, json.loads(config_json))
            client = LLMClient(config.llm_config(), run_dir=config.ledger_dir or config.out, stage=config.stage)
            _WORKER_CACHE[config_json] = (client.model("policy"), make_sandbox(config.sandbox))
        return _WORKER_CACHE[config_json]


def _ray_episode(config_json: str, task_path: str, seed: int, hook_factory) -> dict[str, Any]:
    from mirl.config import build
    from mirl.tasks import load_task

    model, sandbox = _worker_resources(config_json)
    agent = build(RolloutConfig, json.loads(config_json)).agent
    hook = hook_factory() if hook_factory else None
    return run_episode(load_task(task_path), sandbox, model, agent, seed=seed, hook=hook).to_dict()


class _RayExecutor:
    def __init__(self, address: str, config_json: str):
        try:
            import ray
        except ImportError:
            raise RolloutError("--ray needs the ray package: pip install 'mirl[ray]' (or run without --ray)") from None
        if not ray.is_initialized():
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        self._remote = ray.remote(_ray_episode)
        self._config_json = config_json

    def submit(self, task: Task, seed: int, hook_factory) -> Future:
        ref = self._remote.remote(self._config_json, str(task.path), seed, hook_factory)
        fut: Future = Future()
        inner = ref.future()
        inner.add_done_callback(lambda f: None if fut.cancelled() else fut.set_exception(f.exception())
                                if f.exception() else fut.set_result(Trajectory.from_dict(f.result())))
        return fut

    def shutdown(self) -> None:
        pass


class _ThreadExecutor:
    def __init__(self, workers: int, model, sandbox, agent: AgentConfig):
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="episode")
        self.model, self.sandbox, self.agent = model, sandbox, agent

        self.stopped = threading.Event()

    def submit(self, task: Task, seed: int, hook_factory) -> Future:
        return self._pool.submit(self._play, task, seed, hook_factory)

    def _play(self, task: Task, seed: int, hook_factory) -> Trajectory | None:
        if self.stopped.is_set():  # a spend cap stopped the run before this episode began
            return None
        traj = run_episode(task, self.sandbox, self.model, self.agent, seed=seed,
                           hook=hook_factory() if hook_factory else None)
        if stopped_by_budget(traj):
            self.stopped.set()
        return traj

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


# --- the loop ---------------------------------------------------------------------------------------


def run_rollouts(
    config: RolloutConfig,
    tasks: list[Task] | None = None,
    model=None,
    sandbox=None,
    hook_factory: Callable[[], StepHook] | None = None,
    progress_fields: Callable[[Trajectory], dict[str, Any]] | None = None,
) -> RolloutResult:
    """Play every missing (task, seed) pair of `config`; `model`/`sandbox` override the configured ones.

    `progress_fields(trajectory)` adds a stage's own numbers to the progress bar after each episode."""
    tasks = tasks if tasks is not None else load_tasks(config)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / TRAJECTORIES
    done = finished_pairs(path, config.retry_errors)
    seeds = range(config.first_seed, config.first_seed + config.seeds)
    planned = [(t, s) for t in tasks for s in seeds]
    pending = [(t, s) for t, s in planned if (t.id, s) not in done]
    result = RolloutResult(path=path, planned=len(planned), skipped=len(planned) - len(pending))
    (out / "rollout_config.json").write_text(json.dumps(asdict(config), indent=2, default=str))
    if not pending:
        return result

    if config.ray_address:
        executor: Any = _RayExecutor(config.ray_address, json.dumps(asdict(config), default=str))
    else:
        if model is None or sandbox is None:
            from mirl.llm.client import LLMClient
            from mirl.sandbox.select import make_sandbox

            if model is None:
                model = LLMClient(config.llm_config(), run_dir=config.ledger_dir or out, stage=config.stage).model("policy")
            if sandbox is None:
                sandbox = make_sandbox(config.sandbox)
        executor = _ThreadExecutor(config.workers, model, sandbox, config.agent)

    from tqdm.auto import tqdm

    bar = tqdm(total=len(pending), disable=not config.progress, desc="episodes", unit="ep")
    futures = {executor.submit(t, s, hook_factory): (t.id, s) for t, s in pending}
    rewards: list[float] = []
    try:
        with JsonlWriter(path) as writer:
            for fut in as_completed(futures):
                key = futures[fut]
                try:
                    traj = None if fut.cancelled() else fut.result()
                except Exception as e:  # a worker died (Ray) - the pair stays unfinished for the next run
                    log.error("episode %s seed %d was lost: %s", key[0], key[1], e)
                    bar.update(1)
                    continue
                if traj is None:  # not started when a budget stopped the run: the next run plays it
                    continue
                if stopped_by_budget(traj):  # stop cleanly: record it as unfinished, start nothing more
                    traj.exit_reason = STOPPED
                    if not result.stopped:
                        log.warning("%s; stopping: a rerun with a higher budget plays the unfinished episodes",
                                    traj.error)
                    for f in futures:
                        f.cancel()
                    result.stopped += 1
                t = time.perf_counter()
                writer.append(traj.to_dict())
                result.write_s += time.perf_counter() - t
                result.new.append(traj)
                if traj.reward is not None:
                    rewards.append(traj.reward)
                bar.update(1)
                bar.set_postfix(reward=f"{sum(rewards) / len(rewards):.2f}" if rewards else "-",
                                last=traj.exit_reason, **(progress_fields(traj) if progress_fields else {}))
    finally:
        bar.close()
        executor.shutdown()
    return result
