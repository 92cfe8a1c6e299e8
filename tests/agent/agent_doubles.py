"""Test doubles for the harness: an in-memory session and a scripted model."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mirl.llm.types import Completion
from mirl.sandbox.base import CommandResult, VerifyResult
from mirl.tasks import Task


def make_task(tmp_path: Path | None = None, task_id: str = "t1", agent_timeout_s: float = 600.0) -> Task:
    root = tmp_path or Path("/nonexistent")
    return Task(id=task_id, path=root, layout="harbor", instruction="Create /app/hello.txt containing hi.",
                agent_timeout_s=agent_timeout_s, verifier_timeout_s=60.0, build_timeout_s=60.0, cpus=1,
                memory_mb=512, allow_internet=False, image="mirl-base", dockerfile=None, workdir="/app",
                env={}, tests_dir=root / "tests", test_script=root / "tests" / "test.sh", solution=None)


class FakeSession:
    """A session whose commands are answered by a function; records what ran and whether it closed."""

    def __init__(self, task: Task, respond: Callable[[str], CommandResult | str] | None = None,
                 reward: float = 1.0, delay_s: float = 0.0):
        self.task, self.respond, self.reward, self.delay_s = task, respond, reward, delay_s
        self.ran: list[tuple[str, float | None]] = []
        self.closed = self.verified = False
        self.files: dict[str, str] = {}

    def run(self, command: str, timeout: float | None = None) -> CommandResult:
        self.ran.append((command, timeout))
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.respond is not None:
            out = self.respond(command)
            return out if isinstance(out, CommandResult) else CommandResult(out, 0, 0.001)
        if command.startswith("echo "):
            return CommandResult(command[5:].strip("'\"") + "\n", 0, 0.001)
        return CommandResult(f"ran: {command}\n", 0, 0.001)

    def verify(self) -> VerifyResult:
        self.verified = True
        return VerifyResult(reward=self.reward, exit_code=0, duration_s=0.001, tail="1 passed")

    def close(self) -> None:
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class FakeSandbox:
    name = "fake"

    def __init__(self, **session_kwargs: Any):
        self.session_kwargs = session_kwargs
        self.sessions: list[FakeSession] = []

    def start(self, task: Task) -> FakeSession:
        s = FakeSession(task, **self.session_kwargs)
        self.sessions.append(s)
        return s


class Scripted:
    """Replies from a list (cycled at the end) or a function of the messages; reports token counts."""

    def __init__(self, replies: list[Any] | Callable[[list[dict]], Any], name: str = "scripted",
                 input_tokens: Callable[[list[dict]], int] | None = None):
        self.replies, self.name, self.calls = replies, name, []
        self.input_tokens = input_tokens

    def complete(self, messages: list[dict], n: int = 1, **kwargs: Any) -> list[Completion]:
        self.calls.append((messages, kwargs))
        if callable(self.replies):
            reply = self.replies(messages)
        else:
            reply = self.replies[min(len(self.calls) - 1, len(self.replies) - 1)]
        text, tool_calls = (reply, []) if isinstance(reply, str) else reply
        tokens = self.input_tokens(messages) if self.input_tokens else 0
        return [Completion(text=text, model=self.name, input_tokens=tokens, output_tokens=len(text) // 4,
                           tool_calls=tool_calls)]


def bash(cmd: str, thought: str = "I will run a command.") -> str:
    return f"THOUGHT: {thought}\n\n```bash\n{cmd}\n```"


def tool_call(cmd: str, call_id: str = "call_a", name: str = "bash") -> dict:
    import json

    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps({"command": cmd})}}


SUBMIT = bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "Done.")


def write_hello_task(root: Path, task_id: str = "hello", storage_mb: int | None = None) -> Path:
    """A tiny real Harbor task on the local base image: write /app/hello.txt containing `hi`."""
    d = root / task_id
    (d / "environment").mkdir(parents=True, exist_ok=True)
    (d / "tests").mkdir(exist_ok=True)
    (d / "instruction.md").write_text("Create the file /app/hello.txt containing the single line `hi`.\n")
    env = f"[environment]\nstorage_mb = {storage_mb}\n" if storage_mb is not None else ""
    (d / "task.toml").write_text(f'version = "1.0"\n{env}[agent]\ntimeout_sec = 120.0\n[verifier]\ntimeout_sec = 60.0\n')
    (d / "environment" / "Dockerfile").write_text("FROM mirl-base\nWORKDIR /app\nRUN mkdir -p /app\n")
    (d / "tests" / "test.sh").write_text(
        "#!/bin/bash\nif [ \"$(cat /app/hello.txt 2>/dev/null)\" = hi ]; then echo 1 > /logs/verifier/reward.txt; "
        "echo passed; else echo 0 > /logs/verifier/reward.txt; echo failed; fi\n")
    return d
