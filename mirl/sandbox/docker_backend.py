"""Docker Engine API backend: one container per episode, any engine that speaks the API.

Works against Docker or a podman service (`mirl.sandbox.podman.ensure_service`). Task images are
built from the task's `environment/` and cached by a content hash of the build context
(`mirl-task-<id>:<hash12>`), so the second episode of a task starts in ~0.1 s. Images named in
`FROM` that are neither local nor pullable are replaced by the local base image (see
`mirl.sandbox.image`) with a warning, because no registry is reachable on the machines we use.

Each command is a fresh `bash -c` carrying a marker variable (MIRL_CMD=<uuid>); on timeout every
process whose environment holds the marker is killed, background children included, and the
call returns when the shell exits even if a child keeps the output open. Commands are spawned by
the container's PID 1, a small runner (`mirl.sandbox.pid1`) that the host talks to over the
attach stream: ~10 ms a command instead of ~100 ms for a `docker exec`, and it survives
`kill -9 -1`. Images without python3 fall back to one `docker exec` per command.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import re
import socket
import struct
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path

from mirl.sandbox.base import (
    CommandResult,
    HeadTailBuffer,
    SandboxConfig,
    SandboxError,
    TIMEOUT_EXIT_CODE,
    VerifyResult,
    parse_reward,
    tail_lines,
)
from mirl.tasks import Task
from mirl.tasks import dockerfile as dockerfile_mod

log = logging.getLogger(__name__)

PIDS_LIMIT = 1024  # a fork bomb hits this instead of the host's process table
PULL_TIMEOUT_S = 15.0
UNPULLABLE_TTL_S = 24 * 3600.0
KILL_GRACE_S = 1.5  # time allowed for killing a timed-out command's processes
STREAM_HEADER = struct.Struct(">BxxxL")

# Kills every process whose environment holds the marker; repeated because a process may fork
# while we look. Runs without the marker itself, so it never kills itself.
_KILLER = r"""
m="MIRL_CMD=$1"
for pass in 1 2 3 4 5; do
  found=
  for d in /proc/[0-9]*; do
    if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qxF "$m"; then kill -9 "${d#/proc/}" 2>/dev/null; found=1; fi
  done
  [ -z "$found" ] && exit 0
done
exit 0
"""


def engine_available(start: bool = True) -> bool:
    """True when a Docker-API engine answers (DOCKER_HOST, our podman socket, docker.sock).

    With `start`, an installed podman counts: its service is started on our cache socket, so
    `--sandbox auto` gets containers on machines that have podman but no daemon running.
    """
    from mirl.sandbox.podman import ensure_service, find_engine, podman_installed

    if find_engine() is not None:
        return True
    if not start or not podman_installed():
        return False
    try:
        ensure_service()
        return True
    except SandboxError as e:
        log.warning("podman is installed but its service did not start: %s", e)
        return False


def connect(start_podman: bool = True):
    """A docker SDK client for the engine that answers, starting podman's service if allowed."""
    try:
        import docker
    except ImportError as e:  # pragma: no cover - docker is a dependency
        raise SandboxError("the docker backend needs the docker SDK: `pip install docker`") from e
    from mirl.sandbox.podman import ensure_service, find_engine

    url = ensure_service(set_env=False) if start_podman else find_engine()
    if url is None:
        raise SandboxError("no Docker-API engine answers; set DOCKER_HOST or `apt-get install podman runc`")
    return docker.DockerClient(base_url=url, timeout=600)


def safe_name(task_id: str) -> str:
    """A task id as an image repository name: lower case, [a-z0-9._-], no leading separator."""
    name = re.sub(r"[^a-z0-9._-]+", "-", task_id.lower()).strip("._-")
    name = re.sub(r"[._-]{2,}", "-", name)
    return name or "task"


def context_hash(context: Path, dockerfile_text: str, extra: str = "") -> str:
    """Content hash of a build context: paths, exec bits and bytes of every file, plus the Dockerfile."""
    h = hashlib.sha256()
    h.update(dockerfile_text.encode())
    h.update(extra.encode())
    for path in sorted(p for p in context.rglob("*")):
        rel = path.relative_to(context).as_posix()
        if path.is_symlink():
            h.update(f"L {rel} {os.readlink(path)}\n".encode())
        elif path.is_file():
            h.update(f"F {rel} {path.stat().st_mode & 0o111}\n".encode())
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        elif path.is_dir():
            h.update(f"D {rel}\n".encode())
    return h.hexdigest()


def _context_signature(task: Task) -> tuple:
    """Cheap stand-in for the content hash: paths, sizes and mtimes of the build context."""
    entries = []
    for path in sorted(task.context_dir.rglob("*")):
        try:
            st = path.lstat()
        except OSError:
            continue
        entries.append((str(path), st.st_size, st.st_mtime_ns, st.st_mode))
    st = task.dockerfile.stat()
    return (str(task.dockerfile), st.st_size, st.st_mtime_ns, tuple(entries))


def _unpullable_file() -> Path:
    from mirl.sandbox.base import user_cache_dir

    return Path(user_cache_dir()) / "docker" / "unpullable.json"


class _PullMemo:
    """Images that failed to pull, remembered on disk for a day so every run does not wait again."""

    def __init__(self):
        self._mem: dict[str, float] = {}

    def _load(self) -> dict[str, float]:
        try:
            data = json.loads(_unpullable_file().read_text())
            return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def failed_recently(self, ref: str) -> bool:
        when = self._mem.get(ref) or self._load().get(ref)
        return when is not None and time.time() - when < UNPULLABLE_TTL_S

    def remember(self, ref: str) -> None:
        self._mem[ref] = time.time()
        data = self._load()
        data[ref] = self._mem[ref]
        path = _unpullable_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)


PID1_SOURCE = (Path(__file__).with_name("pid1.py")).read_text()
PID1_PATH = "/.mirl-init.py"  # copied in before start; python3 reads it once
_PULL_MEMO = _PullMemo()
_WARNED: set[str] = set()  # substitutions already reported by this process
_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.I)


class DockerSandbox:
    """Makes one container per episode from the task's image; see the module docstring."""

    name = "docker"

    def __init__(self, config: SandboxConfig | None = None, client=None, use_pid1: bool = True):
        self.config = config or SandboxConfig()
        self.use_pid1 = use_pid1  # False: every command is a `docker exec` (for images without python3)
        self._client = client
        self._lock = threading.Lock()
        self._base_checked: str | None = None
        self._pruned = False
        self._built: dict[tuple, str] = {}  # context signature -> image tag built by this sandbox

    @property
    def client(self):
        if self._client is None:
            self._client = connect()
        return self._client

    # --- images ---------------------------------------------------------------------------

    def _has_image(self, ref: str) -> bool:
        import docker

        try:
            self.client.images.get(ref)
            return True
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError:
            return False

    def _pullable(self, ref: str) -> bool:
        """Present locally, or pulled now within a short timeout; failures are remembered."""
        if self._has_image(ref):
            return True
        if _PULL_MEMO.failed_recently(ref):
            return False
        result: list[bool] = []

        def pull():
            try:
                self.client.images.pull(ref)
                result.append(True)
            except Exception as e:  # registry unreachable, unknown image, auth...
                log.debug("pull %s failed: %s", ref, e)

        worker = threading.Thread(target=pull, daemon=True)
        worker.start()
        worker.join(PULL_TIMEOUT_S)
        if result:
            return True
        _PULL_MEMO.remember(ref)
        return False

    def base_image(self) -> str:
        """The local base image, (re)imported from the rootfs when missing or out of date."""
        ref = self.config.base_image
        if self._base_checked != ref:
            import fcntl

            from mirl.sandbox import image as image_mod

            lock_path = Path(image_mod.base_dir()) / "import.lock"
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            with open(lock_path, "w") as lock:  # parallel processes import once
                fcntl.flock(lock, fcntl.LOCK_EX)
                if image_mod.image_state(self.client, ref) in ("missing", "stale"):
                    image_mod.build_rootfs()
                    log.info("importing the base image %s", ref)
                    image_mod.import_image(self.client, ref, force=True)
            self._base_checked = ref
        return ref

    def _rewrite_from(self, text: str) -> tuple[str, list[str]]:
        """Replace FROM images that cannot be had by the base image; returns (text, replaced refs)."""
        variables: dict[str, str] = {}
        stages: set[str] = set()
        replaced: list[str] = []
        lines = text.splitlines(keepends=True)
        for ins in dockerfile_mod.split_lines(text):
            if ins.keyword == "ARG" and not stages:
                name, _, default = ins.args.partition("=")
                variables.setdefault(name.strip(), default.strip().strip('"'))
            if ins.keyword != "FROM":
                continue
            m = _FROM.match(lines[ins.line - 1])
            if not m:
                continue
            raw = m.group(3)
            ref = dockerfile_mod.substitute(raw, variables)
            alias = re.search(r"\bAS\s+(\S+)", m.group(4), re.I)
            if ref.lower() not in stages and ref != "scratch" and not self._pullable(ref):
                base = self.base_image()
                if ref not in _WARNED:
                    _WARNED.add(ref)
                    log.warning("image %s cannot be pulled; building on the local base image %s instead", ref, base)
                lines[ins.line - 1] = m.group(1) + m.group(2) + base + m.group(4) + ("\n" if lines[ins.line - 1].endswith("\n") else "")
                replaced.append(ref)
            if alias:
                stages.add(alias.group(1).lower())
        return "".join(lines), replaced

    def image_for(self, task: Task) -> str:
        """The image a session of `task` starts from, building (and caching) it when needed."""
        with self._lock:
            if task.image:
                if self._pullable(task.image):
                    return task.image
                log.warning("image %s cannot be pulled; using the local base image instead", task.image)
                return self.base_image()
            if task.dockerfile is None:
                raise SandboxError(f"{task.id}: task has neither an image nor a Dockerfile")
            key = _context_signature(task)
            if key not in self._built:  # the hash and engine look-ups cost ~100 ms; skip them once built
                self._built[key] = self._build(task)
            return self._built[key]

    def _build(self, task: Task) -> str:
        import docker

        context = task.context_dir
        text, replaced = self._rewrite_from(task.dockerfile.read_text(encoding="utf-8", errors="replace"))
        extra = ""
        if replaced:
            extra = self.client.images.get(self.config.base_image).id  # a new base image rebuilds tasks
        digest = context_hash(context, text, extra)
        tag = f"mirl-task-{safe_name(task.id)}:{digest[:12]}"
        if self._has_image(tag):
            return tag
        started = time.monotonic()
        log.info("building %s from %s%s", tag, context, f" (FROM {', '.join(replaced)} -> {self.config.base_image})" if replaced else "")
        df_name = ".mirl.Dockerfile"
        with tempfile.TemporaryFile() as fileobj:
            with tarfile.open(fileobj=fileobj, mode="w") as tar:
                for path in sorted(context.iterdir()):
                    tar.add(path, arcname=path.name)
                data = text.encode()
                info = tarfile.TarInfo(df_name)
                info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                tar.addfile(info, io.BytesIO(data))
            fileobj.seek(0)
            lines: list[str] = []
            error = None
            try:
                for chunk in self.client.api.build(
                    fileobj=fileobj, custom_context=True, dockerfile=df_name, tag=tag, rm=True, forcerm=True,
                    pull=False, decode=True, timeout=max(60, int(task.build_timeout_s)),
                ):
                    if "stream" in chunk:
                        lines.extend(chunk["stream"].splitlines())
                        del lines[:-200]
                    if "error" in chunk:
                        error = chunk.get("error") or str(chunk.get("errorDetail"))
            except docker.errors.APIError as e:
                error = str(e)
            except Exception as e:  # read timeout of the build stream
                error = f"{type(e).__name__}: {e}"
        if error or not self._has_image(tag):
            raise SandboxError(build_failure(task.id, error or "image missing after build", lines))
        log.info("built %s in %.1f s", tag, time.monotonic() - started)
        return tag

    # --- sessions -------------------------------------------------------------------------

    def _prune_exited(self) -> None:
        """Remove stopped session containers left by killed processes (never running ones)."""
        try:
            for c in self.client.containers.list(all=True, filters={"label": "mirl.task", "status": "exited"}):
                c.remove(force=True)
        except Exception as e:
            log.debug("pruning exited containers failed: %s", e)

    def start(self, task: Task) -> "DockerSession":
        import docker

        if not self._pruned:
            self._pruned = True
            self._prune_exited()
        image = self.image_for(task)
        network = task.allow_internet and self.config.allow_internet
        workdir = task.workdir
        if task.image and workdir == "/":
            workdir = (self.client.images.get(image).attrs.get("Config") or {}).get("WorkingDir") or "/"
        if self.use_pid1:  # python3 as PID 1 runs commands (see mirl.sandbox.pid1); sleep without python3
            entrypoint = ["sh", "-c", f"command -v python3 >/dev/null 2>&1 && exec python3 -I -S -u {PID1_PATH}; "
                          "echo MIRL-NO-PYTHON; exec sleep infinity"]
        else:
            entrypoint = ["sleep", "infinity"]
        kwargs = dict(
            entrypoint=entrypoint, command=[], detach=True, working_dir=workdir, stdin_open=True,
            environment=dict(task.env), hostname="sandbox", labels={"mirl.task": task.id},
            nano_cpus=int(max(0.1, task.cpus) * 1e9), mem_limit=f"{max(64, int(task.memory_mb))}m",
            pids_limit=PIDS_LIMIT, stop_signal="SIGKILL",
        )
        if not network:
            kwargs["network_mode"] = "none"
        try:
            container = self.client.containers.create(image, **kwargs)
        except docker.errors.ImageNotFound:  # removed behind our back: build again
            self._built.clear()
            container = self.client.containers.create(self.image_for(task), **kwargs)
        session = DockerSession(self, task, container, workdir)
        try:
            files = {PID1_PATH.lstrip("/"): (PID1_SOURCE.encode(), 0o644)} if self.use_pid1 else {}
            container.put_archive("/", _dir_tar(["logs", "logs/verifier"], files))
            container.start()
            if self.use_pid1:
                session.attach_pid1()
        except Exception:
            session.close()
            raise
        return session


def build_failure(task_id: str, error: str, lines: list[str]) -> str:
    """A build error with the apt/pip lines that say what went wrong, first."""
    missing = sorted({m.group(1) for line in lines for m in [re.search(r"Unable to locate package (\S+)", line)] if m})
    head = f"{task_id}: image build failed: {error.strip()}"
    if missing:
        head += f"\napt packages not found on the base image's distribution: {', '.join(missing)}"
    return head + "\n" + "\n".join(lines[-25:])


def _dir_tar(dirs: list[str], files: dict[str, tuple[bytes, int]] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o777 if d.startswith("logs") else 0o755, int(time.time())
            tar.addfile(info)
        for name, (data, mode) in (files or {}).items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _tree_tar(src: Path, arcname: str, extra: dict[str, Path] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if src.is_dir():
            tar.add(src, arcname=arcname)
        else:
            info = tarfile.TarInfo(arcname)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, path in (extra or {}).items():
            tar.add(path, arcname=f"{arcname}/{name}")
    return buf.getvalue()


class _ExecStream:
    """Reads one exec's multiplexed output into a HeadTailBuffer on a thread; stoppable at any time."""

    def __init__(self, response, buffer: HeadTailBuffer):
        self.response = response
        self.fp = response.raw._fp.fp  # the buffered reader over the upgraded socket
        self.buffer = buffer
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        pending = b""
        need = 0  # payload bytes left in the current frame
        try:
            while True:
                chunk = self.fp.read1(1 << 16)
                if not chunk:
                    break
                pending += chunk
                while pending:
                    if need:
                        take = pending[:need]
                        self.buffer.feed(take)
                        need -= len(take)
                        pending = pending[len(take):]
                        continue
                    if len(pending) < STREAM_HEADER.size:
                        break
                    _, need = STREAM_HEADER.unpack(pending[: STREAM_HEADER.size])
                    pending = pending[STREAM_HEADER.size:]
        except (OSError, ValueError, AttributeError):
            pass  # the socket was shut down by stop()
        finally:
            self.done.set()

    def stop(self) -> None:
        try:
            raw = self.fp.raw
            sock = getattr(raw, "_sock", None)
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.thread.join(1.0)
        try:
            self.response.close()
        except Exception:
            pass


class DockerSession:
    """One container; see `mirl.sandbox.base` for the contract."""

    def __init__(self, sandbox: DockerSandbox, task: Task, container, workdir: str):
        self.sandbox = sandbox
        self.config = sandbox.config
        self.task = task
        self.container = container
        self.workdir = workdir
        self.closed = False
        self._pid1 = None  # the attach socket to PID 1's stdin/stdout, when it runs our command runner
        self._pid1_buf = b""
        self._pid1_lines: list[bytes] = []

    def attach_pid1(self, wait: float = 5.0) -> bool:
        """Connect to PID 1's runner; False (and exec mode) when the image has no python3."""
        sock = self.api.attach_socket(self.container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        raw = getattr(sock, "_sock", sock)
        raw.settimeout(None)
        self._pid1 = raw
        deadline = time.monotonic() + wait
        self._pid1_send({"id": "ping", "ping": True})
        while time.monotonic() < deadline:
            reply = self._pid1_recv(min(0.2, deadline - time.monotonic()))
            if reply is not None and reply.get("pong"):
                return True
            if b"MIRL-NO-PYTHON" in b"".join(self.container.logs(stdout=True, stderr=False, tail=5).splitlines()):
                break
        self._drop_pid1()
        log.info("%s: no python3 in the image; running commands with docker exec", self.task.id)
        return False

    def _drop_pid1(self) -> None:
        if self._pid1 is not None:
            try:
                self._pid1.close()
            except OSError:
                pass
        self._pid1 = None

    def _pid1_send(self, request: dict) -> None:
        self._pid1.sendall(json.dumps(request).encode() + b"\n")

    def _pid1_recv(self, timeout: float) -> dict | None:
        """The next JSON reply from PID 1 within `timeout`, None on timeout; raises OSError on EOF."""
        import select

        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            if self._pid1_lines:
                return json.loads(self._pid1_lines.pop(0))
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._pid1], [], [], max(0.0, left))
            if not ready:
                return None
            data = self._pid1.recv(1 << 16)
            if not data:
                raise OSError("PID 1 stream closed")
            self._pid1_buf += data
            # demultiplex docker stream frames: 8-byte header (stream type, size), payload
            payload = b""
            while len(self._pid1_buf) >= STREAM_HEADER.size:
                kind, size = STREAM_HEADER.unpack(self._pid1_buf[: STREAM_HEADER.size])
                if len(self._pid1_buf) < STREAM_HEADER.size + size:
                    break
                if kind == 1:
                    payload += self._pid1_buf[STREAM_HEADER.size: STREAM_HEADER.size + size]
                self._pid1_buf = self._pid1_buf[STREAM_HEADER.size + size:]
            self._pending = getattr(self, "_pending", b"") + payload
            while b"\n" in self._pending:
                line, self._pending = self._pending.split(b"\n", 1)
                if line.strip().startswith(b"{"):
                    self._pid1_lines.append(line)

    @property
    def api(self):
        return self.sandbox.client.api

    def __enter__(self) -> "DockerSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- commands -------------------------------------------------------------------------

    def run(self, command: str, timeout: float | None = None, env: dict[str, str] | None = None,
            output_limit: int | None = None) -> CommandResult:
        if self.closed:
            raise SandboxError("session is closed")
        timeout = self.config.command_timeout_s if timeout is None else float(timeout)
        if self._pid1 is not None:
            result = self._run_pid1(command, timeout, env, output_limit or self.config.output_limit)
            if result is not None:
                return result
        return self._run_exec(command, timeout, env, output_limit)

    def _run_pid1(self, command: str, timeout: float, env: dict[str, str] | None, limit: int) -> CommandResult | None:
        marker = uuid.uuid4().hex
        started = time.monotonic()
        request = {"id": marker, "cmd": command, "cwd": self.workdir, "env": env or {}, "timeout": timeout, "limit": limit,
                   "pids_limit": PIDS_LIMIT}
        try:
            self._pid1_send(request)
            while True:
                reply = self._pid1_recv(started + timeout + 1.5 - time.monotonic())
                if reply is None:
                    raise OSError("no reply from PID 1 in time")
                if reply.get("id") == marker:
                    break  # replies to anything else (e.g. written to /proc/1/fd/0 by a command) are ignored
        except OSError as e:  # PID 1 stuck or gone: kill the command the slow way, continue with exec
            log.warning("%s: command runner failed (%s); falling back to docker exec", self.task.id, e)
            self._drop_pid1()
            self._kill_marked(marker)
            return CommandResult("", TIMEOUT_EXIT_CODE, time.monotonic() - started, timed_out=True)
        if reply.get("error"):  # e.g. no process could be started: the agent sees it as a failed command
            return CommandResult(f"[sandbox: could not run the command: {reply['error']}]\n", 126,
                                 time.monotonic() - started)
        buffer = HeadTailBuffer(limit)
        buffer.head = bytearray(base64.b64decode(reply["head"]))
        buffer.tail = bytearray(base64.b64decode(reply["tail"]))
        buffer.total = int(reply["total"])
        return CommandResult(
            output=buffer.text(), exit_code=int(reply["exit"]), duration_s=time.monotonic() - started,
            timed_out=bool(reply["timed_out"]), truncated=buffer.truncated,
        )

    def _run_exec(self, command: str, timeout: float, env: dict[str, str] | None, output_limit: int | None) -> CommandResult:
        buffer = HeadTailBuffer(output_limit or self.config.output_limit)
        marker = uuid.uuid4().hex
        started = time.monotonic()
        deadline = started + timeout
        # sh merges stderr into stdout at the source so the order is the terminal's order.
        exec_id = self.api.exec_create(
            self.container.id, ["sh", "-c", 'exec bash -c "$1" 2>&1', "sh", command],
            workdir=self.workdir, environment={**(env or {}), "MIRL_CMD": marker}, stdin=False, tty=False,
        )["Id"]
        response = self.api._post_json(
            self.api._url("/exec/{0}/start", exec_id),
            headers={"Connection": "Upgrade", "Upgrade": "tcp"}, data={"Tty": False, "Detach": False}, stream=True,
        )
        self.api._raise_for_status(response)
        stream = _ExecStream(response, buffer)
        exit_code, timed_out = None, False
        try:
            # Common case: the stream ends when the shell exits. Otherwise (a background child keeps
            # it open, or the command runs on) poll the exec's state until the deadline.
            poll = 0.005
            while True:
                left = deadline - time.monotonic()
                if stream.done.wait(min(poll, max(0.0, left))):
                    exit_code = self._wait_exit(exec_id, deadline)
                    break
                info = self.api.exec_inspect(exec_id)
                if not info.get("Running"):
                    exit_code = info.get("ExitCode")
                    stream.done.wait(0.05)  # let the last bytes arrive
                    break
                if time.monotonic() >= deadline:
                    timed_out = True
                    break
                poll = min(0.1, poll * 2)
        finally:
            stream.stop()
        if timed_out:
            self._kill_marked(marker)
            exit_code = TIMEOUT_EXIT_CODE
        elif exit_code is None:
            exit_code = -1
        return CommandResult(
            output=buffer.text(), exit_code=int(exit_code), duration_s=time.monotonic() - started,
            timed_out=timed_out, truncated=buffer.truncated,
        )

    def _wait_exit(self, exec_id: str, deadline: float) -> int | None:
        while True:
            info = self.api.exec_inspect(exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return info["ExitCode"]
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)

    def _kill_marked(self, marker: str) -> None:
        """Kill every process carrying the command's marker; restart the container if we cannot."""
        try:
            exec_id = self.api.exec_create(self.container.id, ["sh", "-c", _KILLER, "sh", marker], user="root")["Id"]
            self.api.exec_start(exec_id)
            info = self.api.exec_inspect(exec_id)
            if info.get("ExitCode") == 0:
                return
            log.warning("killing timed-out command failed (exit %s); restarting the container", info.get("ExitCode"))
        except Exception as e:  # e.g. the pids limit is exhausted by a fork bomb
            log.warning("killing timed-out command failed (%s); restarting the container", e)
        if not self._kill_from_host(marker):
            self.container.restart(timeout=0)

    def _kill_from_host(self, marker: str) -> bool:
        """Kill marked processes through the host's /proc when the engine runs here as our user."""
        try:
            self.container.reload()
            pid = int(self.container.attrs["State"]["Pid"])
            pid_ns = os.readlink(f"/proc/{pid}/ns/pid")
        except (OSError, KeyError, ValueError, TypeError):
            return False
        needle = f"MIRL_CMD={marker}".encode()
        for _ in range(5):
            found = False
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    if os.readlink(f"/proc/{entry}/ns/pid") != pid_ns:
                        continue
                    if needle in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                        os.kill(int(entry), 9)
                        found = True
                except (OSError, ValueError):
                    continue
            if not found:
                return True
        return True

    # --- files ----------------------------------------------------------------------------

    def read_file(self, path: str) -> bytes | None:
        """Bytes of a regular file in the container, or None when it does not exist."""
        import docker

        try:
            bits, _ = self.container.get_archive(path)
        except docker.errors.NotFound:
            return None
        data = b"".join(bits)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    f = tar.extractfile(member)
                    return f.read() if f else None
        return None

    def put_files(self, dest: str, files: dict[str, tuple[bytes, int]]) -> None:
        """Write files (relative name -> (bytes, mode)) under the existing directory `dest`."""
        self.container.put_archive(dest, _dir_tar([], files))

    # --- verification ---------------------------------------------------------------------

    def verify(self) -> VerifyResult:
        task = self.task
        tb1 = task.layout == "terminal-bench"
        extra = {"run-tests.sh": task.test_script} if tb1 else {}
        started = time.monotonic()
        self.run("rm -rf /tests /logs/verifier && mkdir -p /logs/verifier && chmod 777 /logs/verifier", timeout=30)
        self.container.put_archive("/", _tree_tar(task.tests_dir, "tests", extra))
        script = "/tests/run-tests.sh" if tb1 else "/tests/test.sh"
        env = {"TEST_DIR": "/tests", **task.verifier_env}
        result = self.run(f"bash {script}", timeout=task.verifier_timeout_s, env=env,
                          output_limit=max(self.config.output_limit, 20_000))
        tail = tail_lines(result.output, self.config.verifier_tail_lines)
        duration = time.monotonic() - started
        if tb1:
            reward = 1.0 if result.exit_code == 0 and not result.timed_out else 0.0
            return VerifyResult(reward, result.exit_code, duration, tail, None, result.timed_out)
        txt = self.read_file("/logs/verifier/reward.txt")
        js = self.read_file("/logs/verifier/reward.json")
        reward, error = parse_reward(
            txt.decode("utf-8", "replace") if txt is not None else None,
            js.decode("utf-8", "replace") if js is not None else None,
        )
        if result.timed_out:
            error = f"verifier timed out after {task.verifier_timeout_s:.0f} s" + (f"; {error}" if error else "")
        return VerifyResult(reward, result.exit_code, duration, tail, error, result.timed_out)

    # --- cleanup --------------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._drop_pid1()
        try:
            self.container.remove(force=True, v=True)
        except Exception as e:
            import docker

            if not isinstance(e, docker.errors.NotFound):
                log.warning("removing container %s failed: %s", self.container.short_id, e)
