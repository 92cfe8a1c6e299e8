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

    def __str__(self) -> str:
        where = f"{self.file}:{self.field}" if self.field else self.file
        return f"{self.task}: {where}: {self.message}"


class TaskInvalid(ValueError):
    """Raised by `load_task` with every problem found, not just the first."""

    def __init__(self, problems: list[TaskProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class Task:
    """Everything a sandbox, an agent and a verifier need to know about one terminal task."""

    id: str
    path: Path
    layout: Literal["harbor", "terminal-bench"]
    instruction: str
    agent_timeout_s: float
    verifier_timeout_s: float
    build_timeout_s: float
    cpus: float
    memory_mb: int
    allow_internet: bool
    image: str | None  # a prebuilt image name; exactly one of image / dockerfile is set
    dockerfile: Path | None
    workdir: str  # from the Dockerfile's last WORKDIR ("/" when none, as in Docker)
    env: dict[str, str]  # ENV lines of the Dockerfile
    tests_dir: Path
    test_script: Path  # tests/test.sh (Harbor) or run-tests.sh (Terminal-Bench 1)
    solution: Path | None
    metadata: dict[str, Any] = field(default_factory=dict)
    verifier_env: dict[str, str] = field(default_factory=dict)

    @property
    def context_dir(self) -> Path | None:
        """Build context of the Dockerfile (the directory holding it)."""
        return self.dockerfile.parent if self.dockerfile else None

    @property
    def difficulty(self) -> str:
        return str(self.metadata.get("difficulty", ""))
