"""Run a task in a sandbox with a trivial agent: `oracle` (the reference solution) or `noop` (nothing).

This is where tasks and sandboxes meet: oracle = 1 and noop = 0 is the proof that a task and a
backend are both right.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mirl.sandbox import SandboxConfig, make_sandbox
from mirl.sandbox.base import Sandbox
from mirl.sandbox.files import upload, upload_dir
from mirl.sandbox.verifier import combine_steps
from mirl.tasks import Task
from mirl.tasks.envvars import resolve

AGENTS = ("oracle", "noop")


@dataclass
class TrivialRun:
    task: str
    agent: str
    sandbox: str
    reward: float
    duration_s: float
    verifier_tail: str
    verifier_error: str | None = None
    agent_output: str = ""
    agent_exit_code: int | None = None
    error: str | None = None
    rewards: dict[str, float] = field(default_factory=dict)  # reward.json's keys
    steps: list[dict] = field(default_factory=list)  # a multi-step task's per-step results

    def to_dict(self) -> dict:
        return asdict(self)


UNLIMITED_S = 86_400.0  # a task whose agent timeout is unset (no limit) still gets a finite bound per command


def _solve(session, task: Task, solution: Path | None, timeout: float | None, what: str, out: TrivialRun) -> None:
    """Upload and run a reference solution (the task's, or one step's), recording its output."""
    if solution is None:
        raise ValueError(f"{task.id}: no reference solution for {what}")
    if task.layout == "harbor":  # solve.sh may use other files of solution/
        upload_dir(session, solution.parent, "/solution")
    else:
        upload(session, {solution.name: solution}, "/solution")
    env = resolve(task.solution_env, what=f"{task.id}: [solution] env")
    result = session.run(f"bash /solution/{solution.name}", timeout=timeout or UNLIMITED_S, env=env)
    out.agent_output += result.output
    out.agent_exit_code = result.exit_code
    session.run("rm -rf /solution", timeout=30)


def run_trivial(task: Task, agent: str, sandbox: Sandbox | SandboxConfig | str = "auto") -> TrivialRun:
    """Start a session, let the trivial agent act, verify; never raises for a task's own failure.

    A multi-step task runs its steps in order in the one session: the agent acts on a step, the step
    is verified, and a reward below the step's `min_reward` stops the task there (as in Harbor)."""
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r}; choose one of {', '.join(AGENTS)}")
    box = sandbox if hasattr(sandbox, "start") else make_sandbox(sandbox)
    t0 = time.monotonic()
    out = TrivialRun(task=task.id, agent=agent, sandbox=box.name, reward=0.0, duration_s=0.0, verifier_tail="")
    try:
        with box.start(task) as session:
            if task.steps:
                results = []
                for step in task.steps:
                    if agent == "oracle":
                        _solve(session, task, step.solution, step.agent_timeout_s, f"step {step.name}", out)
                    results.append((step.name, session.verify(step)))
                    if step.min_reward is not None and results[-1][1].reward < step.min_reward:
                        break
                verdict = combine_steps(task, results)
            else:
                if agent == "oracle":
                    _solve(session, task, task.solution, task.agent_timeout_s, "the task (solution/solve.sh or "
                           "solution.sh)", out)
                verdict = session.verify()
            out.reward, out.verifier_tail, out.verifier_error = verdict.reward, verdict.tail, verdict.error
            out.rewards, out.steps = verdict.rewards, verdict.steps
    except Exception as e:  # recorded, bounded: one bad task must not stop a batch
        out.error = f"{type(e).__name__}: {e}"
    out.duration_s = round(time.monotonic() - t0, 3)
    return out
