"""Local sandboxes: plain subprocesses on the host, for throwaway machines only.

Nothing is confined: commands run as the calling user with the host's network and files. Use it
where neither a Docker-API engine nor bubblewrap exists (e.g. a rented GPU box); `auto` never
picks it. The task's COPY/ADD files are laid into a fresh temp root per session. When we are root
and `unshare` works, every command runs in a private mount namespace where that temp root's
WORKDIR, /tests, /logs and COPY targets are bind-mounted over the host paths, so tasks' absolute
paths resolve without touching the host's real directories (empty mount points may be created).
Otherwise commands run in the temp copy of WORKDIR and absolute paths point at the host (RUN
lines too: a line writing to /app writes the host's /app). RUN lines that install packages are
skipped with a warning; install them on the machine yourself.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

from mirl.sandbox import layers
from mirl.sandbox.base import (
    CommandResult,
    HeadTailBuffer,
    SandboxConfig,
    SandboxError,
    TIMEOUT_EXIT_CODE,
    VerifyResult,
)
from mirl.sandbox.process import (
    MARKER_VAR,
    Drainer,
    PidsCgroup,
    collect,
    enlarge_pipe,
    kill_tree,
    marker_token,
)
from mirl.sandbox.verifier import run_verifier
from mirl.tasks import Task

log = logging.getLogger(__name__)

SESSION_VAR = "MIRL_SESSION"
PIDS_LIMIT = 1024
_unshare_ok: bool | None = None


def unshare_works() -> bool:
    """Root and `unshare --mount` usable (containers without CAP_SYS_ADMIN say no)."""
    global _unshare_ok
    if _unshare_ok is None:
        _unshare_ok = False
        if os.geteuid() == 0 and shutil.which("unshare"):
            try:
                r = subprocess.run(
                    ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, timeout=10
                )
                _unshare_ok = r.returncode == 0
            except (OSError, subprocess.SubprocessError):
                pass
    return _unshare_ok


def _installs(step: layers.Step) -> bool:
    return any(
        layers._install_args(words) is not None or os.path.basename(words[0]) in ("curl", "wget")
        for words in layers._segments(step.command)
    )


def _sweep_on(tokens: list[bytes], sids: list[int], rounds: int = 20) -> None:
    for _ in range(rounds):
        if not kill_tree(tokens, sids, max_s=0.5):
            return


class LocalSession:
    """Commands as host subprocesses in a temp copy of the task's files."""

    def __init__(self, task: Task, config: SandboxConfig):
        self.task, self.config = task, config
        self.id = uuid.uuid4().hex
        self.lock = threading.Lock()
        self.sweeper: threading.Thread | None = None  # still killing what a timed-out command left
        self.closed = False
        self.sids: list[int] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="mirl-local-"))
        self.root = self.tmp / "root"
        self.home = self.tmp / "home"
        self.home.mkdir()
        try:
            plan, runs, written = layers.apply_to_dir(task, self.root)
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        for d in ("logs/verifier", "logs/agent", "tests"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.workdir = plan.workdir
        self.env = {
            "PATH": os.environ.get("PATH", layers.DEFAULT_PATH),
            "HOME": str(self.home),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            **plan.env,
            SESSION_VAR: self.id,
        }
        self.namespaced = unshare_works()
        self.binds = self._bind_points([plan.workdir, "/logs", "/tests", *written]) if self.namespaced else []
        if not self.namespaced:
            log.warning(
                "local sandbox for %s: no private mount namespace (needs root and `unshare`); commands run in %s "
                "and the task's absolute paths (/app, /tests, /logs) point at the host", task.id, self.root,
            )
        self.cgroup = PidsCgroup.create(f"mirl-local-{self.id[:12]}", PIDS_LIMIT)
        try:
            for step in runs:
                self._run_build_step(step)
        except BaseException:
            self.close()
            raise

    def _bind_points(self, dests: list[str]) -> list[tuple[Path, str]]:
        """(temp path, host path) pairs, outermost first, nested ones dropped; mount points made."""
        out: list[tuple[Path, str]] = []
        for dest in sorted({os.path.normpath(d) for d in dests if d and d != "/"}, key=len):
            if any(dest == b or dest.startswith(b.rstrip("/") + "/") for _, b in out):
                continue
            src = self.root / dest.lstrip("/")
            if not src.exists():
                src.mkdir(parents=True)
            try:
                if src.is_dir():
                    os.makedirs(dest, exist_ok=True)
                elif not os.path.exists(dest):
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    open(dest, "a").close()
            except OSError as e:
                raise SandboxError(f"local sandbox: cannot create mount point {dest} on the host: {e}") from e
            out.append((src, dest))
        return out

    def _run_build_step(self, step: layers.Step) -> None:
        if _installs(step):
            log.warning(
                "local sandbox for %s: skipping Dockerfile line %d (`%s`): the local backend does not install "
                "packages; install them on this machine yourself", self.task.id, step.line, step.text[:100],
            )
            return
        cwd = step.workdir
        res = self._exec(f"cd {shlex.quote(cwd)} && {step.command}", self.task.build_timeout_s, step.env)
        if res.exit_code != 0:
            raise SandboxError(
                f"task {self.task.id}: Dockerfile line {step.line} failed (exit {res.exit_code}):\n{res.output.strip()[-1000:]}"
            )

    def _argv(self, command: str, cwd: str) -> tuple[list[str], str]:
        if not self.namespaced:
            host_cwd = self.root / cwd.lstrip("/")
            host_cwd.mkdir(parents=True, exist_ok=True)
            return ["bash", "-c", command], str(host_cwd)
        mounts = " && ".join(f"mount --bind {shlex.quote(str(s))} {shlex.quote(d)}" for s, d in self.binds)
        wrapper = f"{mounts or 'true'} || exit 125; cd {shlex.quote(cwd)} 2>/dev/null || cd /; exec bash -c \"$1\""
        return ["unshare", "--mount", "--propagation", "private", "--", "bash", "-c", wrapper, "mirl-local", command], "/"

    def _exec(self, command: str, timeout: float, env: dict[str, str] | None = None, cwd: str | None = None) -> CommandResult:
        with self.lock:
            if self.closed:
                raise SandboxError("the session is closed")
            marker = uuid.uuid4().hex
            argv, host_cwd = self._argv(command, cwd or self.workdir)
            full_env = {**self.env, **(env or {}), MARKER_VAR: marker}
            r, w = os.pipe()
            enlarge_pipe(w)
            started = time.monotonic()
            cgroup = self.cgroup
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=w, stderr=w, cwd=host_cwd, env=full_env,
                    start_new_session=True, preexec_fn=cgroup.join_self if cgroup else None,
                )
            except OSError as e:
                os.close(r)
                raise SandboxError(f"cannot start bash: {e}") from e
            finally:
                os.close(w)
            self.sids.append(proc.pid)
            pidfd = os.pidfd_open(proc.pid)
            buf = HeadTailBuffer(self.config.output_limit)
            try:
                code = collect(r, buf, started + timeout, pidfd, proc.poll)
            finally:
                os.close(pidfd)
            timed_out = code is None
            if timed_out:
                tokens = [marker_token(MARKER_VAR, marker)]
                if kill_tree(tokens, [proc.pid]):
                    # on a loaded machine a fork bomb can outrun one budget: keep sweeping a while
                    self.sweeper = threading.Thread(target=_sweep_on, args=(tokens, [proc.pid]), daemon=True)
                    self.sweeper.start()
                try:
                    proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    pass
                code = TIMEOUT_EXIT_CODE
            elif code < 0:
                code = 128 - code
            Drainer.shared().adopt(r)
            return CommandResult(buf.text(), code, time.monotonic() - started, timed_out, buf.truncated)

    def run(self, command: str, timeout: float | None = None, env: dict[str, str] | None = None) -> CommandResult:
        timeout = self.config.command_timeout_s if timeout is None else timeout
        if self.sweeper is not None:  # let the last timeout's sweep finish so this command can fork
            self.sweeper.join(timeout=10)
            self.sweeper = None
        return self._exec(command, timeout, env)

    def _put_tests(self) -> None:
        dest = self.root / "tests"
        shutil.rmtree(dest, ignore_errors=True)
        if self.task.tests_dir.is_dir():
            shutil.copytree(self.task.tests_dir, dest, symlinks=True)
        else:
            dest.mkdir()
        if self.task.layout == "terminal-bench":
            shutil.copy2(self.task.test_script, dest / "run-tests.sh")
        (self.root / "logs" / "verifier").mkdir(parents=True, exist_ok=True)

    def read_file(self, path: str) -> str | None:
        try:
            return (self.root / path.lstrip("/")).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def verify(self) -> VerifyResult:
        return run_verifier(self, self._put_tests)

    def close(self) -> None:
        if self.closed:
            return
        with self.lock:
            self.closed = True
            kill_tree([marker_token(SESSION_VAR, self.id)], self.sids)
            if self.cgroup is not None:
                self.cgroup.remove()
                self.cgroup = None
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> "LocalSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LocalSandbox:
    name = "local"

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig(backend="local")

    def start(self, task: Task) -> LocalSession:
        log.warning("local sandbox: task %s runs UNCONFINED on this machine (throwaway machines only)", task.id)
        return LocalSession(task, self.config)
