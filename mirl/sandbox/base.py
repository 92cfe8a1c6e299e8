"""The Sandbox contract, shared by the docker, bwrap and local backends.

- `Sandbox.start(task)` returns a `Session` on a fresh copy of the task's environment: the image
  built from `environment/Dockerfile` (or the task's image), task files at their COPY targets,
  the working directory at the Dockerfile's WORKDIR, `/logs/verifier` present and empty.
- `Session.run(command, timeout)` runs `bash -c command` in WORKDIR and returns a `CommandResult`:
  stdout and stderr interleaved as a terminal would show them, the exit code, the duration and a
  `timed_out` flag. **Each command is a fresh shell** (as in mini-swe-agent): `cd` and `export`
  do not carry over, files and background processes do. This keeps replaying a prefix
  deterministic: a step means the same thing whatever ran before it in the same shell.
- The call returns when the command's shell exits, even if a background child keeps the output
  pipe open (a started service must not hang the agent).
- A command that outlives `timeout` (default 120 s) is killed with its whole process tree,
  background children included, and the call returns within timeout + 2 s with `timed_out=True`
  and exit code 124.
- Output is capped at `SandboxConfig.output_limit` characters (10,000 by default): the head and
  the tail are kept with a marker saying how much was elided. A 1 GB flood neither hangs nor
  exhausts memory. Bytes that are not UTF-8 are shown with replacement characters.
- `Session.verify()` runs only after the agent is done: it empties `/logs/verifier`, copies the
  task's `tests/` to a fresh `/tests`, runs the test script (`bash /tests/test.sh`; Terminal-Bench 1:
  `bash /tests/run-tests.sh`) under the task's verifier timeout and reads
  `/logs/verifier/reward.json` (`{"reward": x}`, or several keys scored by `SandboxConfig.reward_key`,
  each kept in `VerifyResult.rewards`), else `reward.txt` (a float). A verifier that times out, and a
  missing, empty or non-finite reward file, score 0 with the reason in `error`. The task's
  `[verifier] env` is set for it, and `[environment] env` for every command; both are resolved
  from the host's environment when the session starts (`mirl.tasks.envvars`).
  Terminal-Bench 1 tasks that write no reward file score 1 when the script exits 0. The rule
  lives in one place, `mirl.sandbox.verifier`, for every backend.
- `Session.close()` always cleans up (container, mounts, temp dirs, processes); sessions are
  context managers and closing twice is harmless.
- Snapshots, where the backend has them (docker, bwrap; see `mirl.sandbox.snapshot`):
  `Session.snapshot()` saves the session's files and returns a handle that outlives the session;
  `Sandbox.start(task, snapshot=handle)` starts a fresh session on those files;
  `Sandbox.drop_snapshot(handle)` deletes one. A snapshot holds files, never running processes:
  a service a command started is not running in a session started from it. Sessions of a
  backend that cannot snapshot (local) have no `snapshot` attribute.

Details every backend keeps the same way:

- A command's environment is built, never inherited from the host: PATH, HOME, the Dockerfile's
  ENV, per-call extras (the verifier's env), and `MIRL_CMD=<uuid>`, the marker by which the
  command's processes are found and killed on timeout (together with its session id, since each
  command is its own session leader). A command killed by signal N exits 128+N.
- `/tests` holds none of the task's tests while the agent works; verify() replaces it with a fresh copy.
- After a command returns, its output pipe is drained in the background rather than closed, so a
  service started with `&` that keeps logging does not die of SIGPIPE.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from mirl.paths import user_cache_dir  # noqa: F401  (re-exported: the sandbox modules' cache root)
from mirl.tasks import Task

log = logging.getLogger(__name__)

DEFAULT_COMMAND_TIMEOUT_S = 120.0
DEFAULT_OUTPUT_LIMIT = 10_000
TIMEOUT_EXIT_CODE = 124


class SandboxError(RuntimeError):
    """A sandbox could not be built or started; the message says what to install or change."""


@dataclass
class CommandResult:
    output: str
    exit_code: int
    duration_s: float
    timed_out: bool = False
    truncated: bool = False


@dataclass
class VerifyResult:
    reward: float
    exit_code: int
    duration_s: float
    tail: str  # the last lines of the verifier's output
    error: str | None = None  # set when the reward could not be read (reward is then 0)
    timed_out: bool = False
    rewards: dict[str, float] = field(default_factory=dict)  # every key of reward.json (reward.txt: "reward")
    steps: list[dict] = field(default_factory=list)  # a multi-step task's per-step results, in order


@dataclass
class SandboxConfig:
    """How sandboxes are made; the same fields for every backend."""

    backend: str = field(default="auto", metadata={"help": "auto | docker | bwrap | local"})
    command_timeout_s: float = field(default=DEFAULT_COMMAND_TIMEOUT_S, metadata={"above": 0, "help": "default per-command timeout"})
    output_limit: int = field(default=DEFAULT_OUTPUT_LIMIT, metadata={"min": 1, "help": "characters of command output kept (head + tail)"})
    allow_internet: bool = field(default=False, metadata={"help": "let tasks that ask for network have it"})
    base_image: str = field(default="mirl-base", metadata={"help": "local base image substituted for unpullable FROM images"})
    verifier_tail_lines: int = field(default=40, metadata={"min": 0, "help": "lines of verifier output kept in results"})
    reward_key: str = field(default="mean", metadata={
        "help": "how a reward.json of several keys scores: mean (of all keys, as Harbor), all (1 when every key "
                "is 1, else 0), or one key's name"})

    def __post_init__(self) -> None:
        if not isinstance(self.reward_key, str) or not self.reward_key.strip():
            raise ValueError(f"sandbox.reward_key must be mean, all or a key of reward.json, got {self.reward_key!r}")


@runtime_checkable
class Session(Protocol):
    task: Task

    def run(self, command: str, timeout: float | None = None) -> CommandResult: ...

    def verify(self) -> VerifyResult: ...

    def close(self) -> None: ...

    def __enter__(self) -> Session: ...

    def __exit__(self, *exc) -> None: ...


@runtime_checkable
class Sandbox(Protocol):
    name: str
    config: SandboxConfig

    def start(self, task: Task, snapshot: str | None = None) -> Session: ...


class HeadTailBuffer:
    """Keeps the first and last `limit // 2` bytes of a stream of any size in bounded memory."""

    def __init__(self, limit: int = DEFAULT_OUTPUT_LIMIT):
        self.limit = max(2, limit)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        half = self.limit // 2
        room = half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if len(chunk) >= half:  # a flood: only the chunk's end can survive, copy just that
            self.tail = bytearray(chunk[len(chunk) - half :])
        elif chunk:
            self.tail += chunk
            if len(self.tail) > 2 * half:  # amortise trimming
                del self.tail[: len(self.tail) - half]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + min(len(self.tail), self.limit // 2)

    def text(self) -> str:
        half = self.limit // 2
        tail = bytes(self.tail[-half:]) if len(self.tail) > half else bytes(self.tail)
        if not self.truncated:  # one decode: a character across the head/tail seam stays whole
            return (bytes(self.head) + tail).decode("utf-8", errors="replace")
        head = bytes(self.head).decode("utf-8", errors="replace")
        elided = self.total - len(self.head) - len(tail)
        return (
            head.rstrip("\ufffd")
            + f"\n[... {elided} bytes of output elided ...]\n"
            + tail.decode("utf-8", errors="replace").lstrip("\ufffd")
        )


def tail_lines(text: str, n: int) -> str:
    return "\n".join(text.splitlines()[-n:])




def task_env(task: Task) -> dict[str, str]:
    """The task's `[environment] env`, resolved from the host now; SandboxError naming what is unset."""
    from mirl.tasks.envvars import MissingVariable, resolve

    try:
        return resolve(task.environment_env, what=f"task {task.id}: [environment] env")
    except MissingVariable as e:
        raise SandboxError(str(e)) from None


_storage_warned: set[str] = set()


def warn_unbounded_storage(task: Task, backend: str, reason: str = "") -> None:
    """Say once a backend, when a task asks for `storage_mb` that the backend cannot bound here, rather
    than pretend: bwrap on a host without free loop devices or mkfs.ext4, containers whose engine
    storage is not on this host (its upper directories cannot be watched)."""
    if task.storage_mb is not None and backend not in _storage_warned:
        _storage_warned.add(backend)
        log.warning(
            "task %s asks for storage_mb = %s; the %s backend does not bound disk use%s: a command that fills the "
            "disk is stopped by the host's free space only (the session's files are removed at close)",
            task.id, task.storage_mb, backend, f" here ({reason})" if reason else "")


def refuse_steps(task: Task, backend: str) -> None:
    """Multi-step tasks run on the docker backend only; the others say so instead of running step one."""
    if task.steps:
        raise SandboxError(f"task {task.id} ({task.path}) has {len(task.steps)} steps "
                           f"({', '.join(s.name for s in task.steps)}); multi-step tasks run on the docker backend, "
                           f"not {backend}")
