"""Run a task in a sandbox with a trivial agent: `oracle` (the reference solution) or `noop` (nothing).

This is where tasks and sandboxes meet: oracle = 1 and noop = 0 is the proof that a task and a
backend are both right.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from mirl.sandbox import SandboxConfig, make_sandbox
from mirl.sandbox.base import Sandbox
from mirl.sandbox.files import upload, upload_dir
from mirl.tasks import Task

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

    def to_dict(self) -> dict:
        return asdict(self)


def run_trivial(task: Task, agent: str, sandbox: Sandbox | SandboxConfig | str = "auto") -> TrivialRun:
    """Start a session, let the trivial agent act, verify; never raises for a task's own failure."""
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r}; choose one of {', '.join(AGENTS)}")
    box = sandbox if hasattr(sandbox, "start") else make_sandbox(sandbox)
    t0 = time.monotonic()
    out = TrivialRun(task=task.id, agent=agent, sandbox=box.name, reward=0.0, duration_s=0.0, verifier_tail="")
    try:
        with box.start(task) as session:
            if agent == "oracle":
                if task.solution is None:
                    raise ValueError(f"{task.id}: no reference solution (solution/solve.sh or solution.sh)")
                if task.layout == "harbor":  # solve.sh may use other files of solution/
                    upload_dir(session, task.solution.parent, "/solution")
                else:
                    upload(session, {task.solution.name: task.solution}, "/solution")
                name = task.solution.name
                result = session.run(f"bash /solution/{name}", timeout=task.agent_timeout_s)
                out.agent_output, out.agent_exit_code = result.output, result.exit_code
                session.run("rm -rf /solution", timeout=30)
            verdict = session.verify()
            out.reward, out.verifier_tail, out.verifier_error = verdict.reward, verdict.tail, verdict.error
    except Exception as e:  # recorded, bounded: one bad task must not stop a batch
        out.error = f"{type(e).__name__}: {e}"
    out.duration_s = round(time.monotonic() - t0, 3)
    return out

