"""The Task record and the error type the loader reports problems with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal


@dataclass(frozen=True)
class TaskProblem:
    """One thing wrong with a task directory, precise enough to fix without reading our code."""

    task: str
    file: str  # relative to the task directory, e.g. "task.toml"
    field: str  # e.g. "agent.timeout_sec"; "" when the whole file is at fault
    message: str
    path: str = ""  # the task directory as the user can find it (relative to the working directory when below it)

    def __str__(self) -> str:
        where = f"{self.file}:{self.field}" if self.field else self.file
        return f"{self.path or self.task}: {where}: {self.message}"


class TaskInvalid(ValueError):
    """Raised by `load_task` with every problem found, not just the first."""

    def __init__(self, problems: list[TaskProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def read_task_file(path: Path) -> str:
    """A task file's text; ValueError saying what is wrong when it is unreadable or not UTF-8 text
    (a task's problem to report, never a traceback out of the loader)."""
    try:
        return path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise ValueError("a directory, not a file") from None
    except OSError as e:
        raise ValueError(f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"not a text file (byte {e.start} is not UTF-8)") from None


@dataclass(frozen=True)
class TaskStep:
    """One step of a Harbor multi-step task (`[[steps]]` + `steps/<name>/`), run in order in one environment."""

    name: str
    instruction: str
    tests_dir: Path | None  # steps/<name>/tests, copied over the task's tests/ for this step's verification
    agent_timeout_s: float | None  # None: no limit
    verifier_timeout_s: float
    solution: Path | None = None  # steps/<name>/solution/solve.sh
    min_reward: float | None = None  # a reward below it stops the task after this step
    verifier_env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    """Everything a sandbox, an agent and a verifier need to know about one terminal task."""

    id: str
    path: Path
    layout: Literal["harbor", "terminal-bench"]
    instruction: str
    agent_timeout_s: float | None  # None: no limit (Harbor's `[agent] timeout_sec` unset)
    verifier_timeout_s: float
    build_timeout_s: float
    cpus: float | None  # None: unset, the backend's default (no limit)
    memory_mb: int | None  # None: unset, likewise
    allow_internet: bool  # the task asks for network; the run's SandboxConfig still decides
    image: str | None  # a prebuilt image name; exactly one of image / dockerfile is set
    dockerfile: Path | None
    workdir: str  # from the Dockerfile's last WORKDIR ("/" when none, as in Docker)
    env: dict[str, str]  # ENV lines of the Dockerfile
    tests_dir: Path
    test_script: Path  # tests/test.sh (Harbor) or run-tests.sh (Terminal-Bench 1, or its default)
    solution: Path | None
    metadata: dict[str, Any] = field(default_factory=dict)
    verifier_env: dict[str, str] = field(default_factory=dict)  # `[verifier] env`, ${VAR} templates unresolved
    environment_env: dict[str, str] = field(default_factory=dict)  # `[environment] env`, likewise
    solution_env: dict[str, str] = field(default_factory=dict)  # `[solution] env`, likewise
    storage_mb: int | None = None
    gpus: int | None = None
    network_mode: str = ""  # Harbor's network_mode as written ("" when unset)
    steps: tuple[TaskStep, ...] = ()  # a multi-step task's steps, in order; empty for a single-step task
    step_reward: Literal["mean", "final"] = "mean"  # how step rewards make the task's reward
    notes: tuple[str, ...] = ()  # fields that were read but are not applied, said once instead of ignored

    @property
    def context_dir(self) -> Path | None:
        """Build context of the Dockerfile (the directory holding it)."""
        return self.dockerfile.parent if self.dockerfile else None

    @property
    def difficulty(self) -> str:
        return str(self.metadata.get("difficulty", ""))
