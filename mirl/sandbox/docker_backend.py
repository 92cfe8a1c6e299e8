"""Docker Engine API backend: one container per episode, any engine that speaks the API.

Works against Docker or a podman service (`mirl.sandbox.podman.ensure_service`). Building and
caching task images, and substituting unpullable `FROM` images, is `mirl.sandbox.docker_images`.

Each command is a fresh `bash -c` carrying a marker variable (MIRL_CMD=<uuid>); on timeout every
process whose environment holds the marker is killed, background children included, and the
call returns when the shell exits even if a child keeps the output open. Commands are spawned by
the container's PID 1, a small runner (`mirl.sandbox.pid1`) that the host talks to over the
attach stream: ~10 ms a command instead of ~100 ms for a `docker exec`, and it survives
`kill -9 -1`. Images without python3 fall back to one `docker exec` per command.

Snapshots (`mirl.sandbox.snapshot`): `DockerSession.snapshot()` commits the container to a local
image `mirl-snapshot-<task>:<id>` labelled with the task, and `start(task, snapshot=tag)` starts
from that image. Running processes are not in an image: a session started from a snapshot has
only the files.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import socket
import struct
import tarfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from mirl.sandbox.base import (
    TIMEOUT_EXIT_CODE,
    CommandResult,
    HeadTailBuffer,
    SandboxConfig,
    SandboxError,
    VerifyResult,
    task_env,
    warn_unbounded_storage,
)
from mirl.sandbox.disk_watch import POLL_S, DiskWatch
from mirl.sandbox.docker_images import (
    TaskImages,
    build_failure,
    connect,
    context_hash,
    engine_available,
    safe_name,
)
from mirl.sandbox.owner import owner_gone, owner_id
from mirl.sandbox.podman import DEFAULT_ULIMITS
from mirl.sandbox.snapshot import LABEL, REPOSITORY, check_task, decode_meta, encode_meta, unknown
from mirl.sandbox.verifier import run_verifier
from mirl.tasks import Task, TaskStep

log = logging.getLogger(__name__)
__all__ = ["DockerSandbox", "DockerSession", "PIDS_LIMIT", "build_failure", "connect", "context_hash",
           "engine_available", "safe_name"]

PIDS_LIMIT = 1024  # a fork bomb hits this instead of the host's process table
KILL_GRACE_S = 1.5  # time allowed for killing a timed-out command's processes
STREAM_HEADER = struct.Struct(">BxxxL")

# Kills every process whose environment holds the marker; runs without the marker itself, so it
# never kills itself. Each round stops every marked process, pass after pass until no new one
# appears (a stopped process cannot fork, nor react to its child's death: a shell whose child was
# killed first would run its next command), then SIGKILLs them all; rounds repeat while any is found.
_KILLER = r"""
m="MIRL_CMD=$1"
for round in 1 2 3 4 5; do
  stopped=" "
  for pass in 1 2 3 4 5 6 7 8; do
    new=
    for d in /proc/[0-9]*; do
      p=${d#/proc/}
      case "$stopped" in *" $p "*) continue ;; esac
      if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qxF "$m"; then kill -STOP "$p" 2>/dev/null; stopped="$stopped$p "; new=1; fi
    done
    [ -z "$new" ] && break
  done
  [ "$stopped" = " " ] && exit 0
  for p in $stopped; do kill -9 "$p" 2>/dev/null; done
done
exit 0
"""


# Files the engine mounts over the image: a commit leaves them out. The script prints, for each
# one that is a mount point here, its path, mtime and base64 contents.
MOUNTED = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")
_MOUNTED_SCRIPT = r"""
for f in /etc/hosts /etc/hostname /etc/resolv.conf; do
  awk '{print $5}' /proc/self/mountinfo | grep -qxF "$f" || continue
  [ -f "$f" ] && printf '%s %s %s\n' "$f" "$(date -r "$f" +%s.%N)" "$(base64 -w0 < "$f")"
done
exit 0
"""
_B64 = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


def _epoch(stamp: str) -> float:
    """Seconds since the epoch of an engine's RFC 3339 time with up to nanoseconds ("...:49.172068364Z")."""
    from datetime import datetime

    main, _, rest = stamp.partition(".")
    digits = "".join(c for c in rest if c.isdigit()) if rest else ""
    zone = rest[len(digits):] if rest else main[19:]
    when = datetime.fromisoformat(main[:19] + (zone.replace("Z", "+00:00") or "+00:00"))
    return when.timestamp() + (float(f"0.{digits}") if digits else 0.0)


PID1_SOURCE = (Path(__file__).with_name("pid1.py")).read_text()
PID1_PATH = "/.mirl-init.py"  # copied in before start; python3 reads it once
class DockerSandbox(TaskImages):
    """Makes one container per episode from the task's image; see the module docstring."""

    name = "docker"

    def __init__(self, config: SandboxConfig | None = None, client=None, use_pid1: bool = True):
        self.config = config or SandboxConfig()
        self.use_pid1 = use_pid1  # False: every command is a `docker exec` (for images without python3)
        self._client = client
        self._pruned = False
        self._init_images()

    @property
    def client(self):
        if self._client is None:
            self._client = connect()
        return self._client

    # --- sessions -------------------------------------------------------------------------

    def _prune_exited(self) -> None:
        """Remove session containers left behind: stopped ones, and running ones whose owner process
        (label `mirl.owner`, see `mirl.sandbox.owner`) is gone, e.g. a run killed with SIGKILL."""
        try:
            for c in self.client.containers.list(all=True, filters={"label": "mirl.task"}):
                if c.status == "exited" or owner_gone(c.labels.get("mirl.owner", "")):
                    log.info("removing container %s of task %s left by an ended run", c.short_id, c.labels.get("mirl.task"))
                    c.remove(force=True)
        except Exception as e:
            log.debug("pruning left-over containers failed: %s", e)

    def start(self, task: Task, snapshot: str | None = None) -> DockerSession:
        """A fresh container of the task's image, or of a snapshot of it (`DockerSession.snapshot`)."""
        import docker

        if not self._pruned:
            self._pruned = True
            self._prune_exited()
        meta = None
        if snapshot is not None:
            meta = self._snapshot_meta(snapshot)
            check_task(meta, snapshot, self.name, task.id)
        extra_env = task_env(task)
        image = snapshot if snapshot is not None else self.image_for(task)
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
            environment={**task.env, **extra_env}, hostname="sandbox",
            labels={"mirl.task": task.id, "mirl.owner": owner_id()}, pids_limit=PIDS_LIMIT, stop_signal="SIGKILL",
        )
        if task.cpus is not None:  # unset: no limit, the engine's default (as Harbor leaves it to the provider)
            kwargs["nano_cpus"] = int(max(0.1, task.cpus) * 1e9)
        if task.memory_mb is not None:
            kwargs["mem_limit"] = f"{max(64, int(task.memory_mb))}m"
        if task.storage_mb is not None:  # no file past the task's disk (mirl.sandbox.disk_watch bounds the total);
            size = int(task.storage_mb) << 20  # ulimits given replace the engine's defaults: restate those
            kwargs["ulimits"] = [docker.types.Ulimit(name=k, soft=a, hard=b) for k, (a, b) in DEFAULT_ULIMITS.items()]
            kwargs["ulimits"].append(docker.types.Ulimit(name="fsize", soft=size, hard=size))
        if not network:
            kwargs["network_mode"] = "none"
        try:
            container = self.client.containers.create(image, **kwargs)
        except docker.errors.ImageNotFound:  # removed behind our back: build again
            if snapshot is not None:
                raise unknown(snapshot, self.name, "its image was removed") from None
            self._built.clear()
            container = self.client.containers.create(self.image_for(task), **kwargs)
        session = DockerSession(self, task, container, workdir)
        try:
            files = {PID1_PATH.lstrip("/"): (PID1_SOURCE.encode(), 0o644)} if self.use_pid1 else {}
            container.put_archive("/", _dir_tar(["logs", "logs/verifier"], files))
            container.start()
            if self.use_pid1:
                session.attach_pid1()
            if task.storage_mb is not None:
                session.watch_disk()
            if meta and meta.get("mounted"):
                session.write_mounted(meta["mounted"])
        except Exception:
            session.close()
            raise
        return session

    # --- snapshots (see mirl.sandbox.snapshot) ----------------------------------------------

    def _snapshot_meta(self, handle: str) -> dict:
        """The metadata of snapshot image `handle`; SandboxError when it is no snapshot of ours."""
        import docker

        if not isinstance(handle, str) or not handle.startswith(f"{REPOSITORY}-"):
            raise unknown(handle, self.name, f"docker snapshots are image tags {REPOSITORY}-<task>:<id>")
        try:
            labels = self.client.images.get(handle).labels or {}
        except docker.errors.ImageNotFound:
            raise unknown(handle, self.name, "no such image on the engine (dropped, or taken on another engine)") from None
        except docker.errors.APIError as e:
            raise unknown(handle, self.name, f"the engine refused it: {e.explanation or e}") from None
        meta = decode_meta(labels.get(LABEL, ""))
        if meta is None:
            raise unknown(handle, self.name, f"the image has no {LABEL} label: it is not a snapshot")
        return meta

    def list_snapshots(self, task: str | None = None) -> list[str]:
        """Handles of the snapshot images on the engine (of task id `task` only, when given)."""
        out = []
        for image in self.client.images.list(filters={"label": LABEL}):
            meta = decode_meta((image.labels or {}).get(LABEL, "")) or {}
            if task is None or meta.get("task") == task:
                out += [t.split("/")[-1] for t in image.tags if t.split("/")[-1].startswith(f"{REPOSITORY}-")]
        return sorted(out)

    def drop_snapshot(self, handle: str) -> None:
        """Remove a snapshot image; SandboxError when it is unknown or a session still runs from it."""
        import docker

        self._snapshot_meta(handle)
        try:
            self.client.images.remove(handle)
        except docker.errors.APIError as e:
            raise SandboxError(f"could not drop snapshot {handle!r}: {e.explanation or e} "
                               "(close the sessions started from it first)") from None

    def prune_snapshots(self, keep=(), task: str | None = None) -> list[str]:
        """Drop every snapshot (of task id `task`, when given) not in `keep`; returns the dropped handles.
        The engine may be shared: without `task` this drops other runs' snapshots too."""
        keep = set(keep)
        dropped = [h for h in self.list_snapshots(task) if h not in keep]
        for h in dropped:
            self.drop_snapshot(h)
        return dropped


def _unpadded(fill: Callable[[tarfile.TarFile], None]) -> bytes:
    """A tar archive ending at its two end blocks, without the zero padding to a full record that
    `tarfile` appends: podman's archive PUT reads to the end blocks and closes its pipe, and a sender
    still writing padding then fails with a spurious 500 "write |1: broken pipe" (containers/buildah#6573)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        fill(tar)
    return buf.getvalue()[:tar.offset]  # close() counted the two end blocks in, not the padding


def _dir_tar(dirs: list[str], files: dict[str, tuple[bytes, int]] | None = None) -> bytes:
    return _unpadded(lambda tar: _fill_dirs(tar, dirs, files))


def _fill_dirs(tar: tarfile.TarFile, dirs: list[str], files: dict[str, tuple[bytes, int]] | None) -> None:
    for d in dirs:
        info = tarfile.TarInfo(d)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o777 if d.startswith("logs") else 0o755, int(time.time())
        tar.addfile(info)
    for name, (data, mode) in (files or {}).items():
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        tar.addfile(info, io.BytesIO(data))


def _tree_tar(src: Path, arcname: str, extra: dict[str, Path] | None = None) -> bytes:
    return _unpadded(lambda tar: _fill_tree(tar, src, arcname, extra))


def _fill_tree(tar: tarfile.TarFile, src: Path, arcname: str, extra: dict[str, Path] | None) -> None:
    """`src` as `arcname`; a linked `src` (or file in `extra`) is read through, links inside stay links."""
    if src.is_dir():
        tar.add(os.path.realpath(src), arcname=arcname)
    else:
        info = tarfile.TarInfo(arcname)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    for name, path in (extra or {}).items():
        tar.add(os.path.realpath(path), arcname=f"{arcname}/{name}")


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
        self._disk: DiskWatch | None = None

    def watch_disk(self) -> None:
        """Bound the task's storage_mb by watching the container's upper directory while commands run
        (`mirl.sandbox.disk_watch`); an engine whose storage is not on this host cannot be watched."""
        self.container.reload()
        upper = (self.container.attrs.get("GraphDriver") or {}).get("Data", {}).get("UpperDir")
        if upper and os.path.isdir(upper):
            self._disk = DiskWatch(Path(upper), self.task.storage_mb)
        else:
            warn_unbounded_storage(self.task, self.sandbox.name, reason="the engine's storage is not on this "
                                   "host: single files are capped at storage_mb, the total is not")

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

    def __enter__(self) -> DockerSession:
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
        over_disk = False
        try:
            self._pid1_send(request)
            while True:
                left = started + timeout + 1.5 - time.monotonic()
                watching = self._disk is not None and not over_disk and left > 0
                reply = self._pid1_recv(min(left, POLL_S) if watching else left)
                if reply is None:
                    if watching:
                        if self._disk.over():  # stop the command as a timeout would; the reply follows
                            over_disk = True
                            self._kill_marked(marker)
                        continue
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
            output=buffer.text() + (self._disk.note() if over_disk else ""), exit_code=int(reply["exit"]),
            duration_s=time.monotonic() - started, timed_out=bool(reply["timed_out"]), truncated=buffer.truncated,
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

    # --- snapshots ------------------------------------------------------------------------

    def snapshot(self) -> str:
        """Commit the container's files to a local image and return its tag (see `mirl.sandbox.snapshot`).

        The image holds files only, not the processes that run now. The engine-mounted files
        (/etc/hosts, ...) are not in a commit: those a command wrote to go into the image's label."""
        import docker

        if self.closed:
            raise SandboxError("session is closed")
        meta = encode_meta({"task": self.task.id, "created": round(time.time(), 3), "mounted": self._mounted_changes()})
        if len(meta) > 256 * 1024:
            raise SandboxError(f"{self.task.id}: the files the engine mounts (/etc/hosts, ...) are too large to snapshot")
        repository, tag = f"{REPOSITORY}-{safe_name(self.task.id)}", uuid.uuid4().hex[:12]
        changes = [f"LABEL {LABEL}={meta}"]
        try:
            self.container.commit(repository=repository, tag=tag, pause=True, changes=changes)
        except docker.errors.APIError as e:  # engines without a cgroup freezer cannot pause
            log.info("committing %s paused failed (%s); committing it running", self.container.short_id, e)
            try:
                self.container.commit(repository=repository, tag=tag, pause=False, changes=changes)
            except docker.errors.APIError as e:
                raise SandboxError(f"{self.task.id}: committing the container failed: {e.explanation or e}") from None
        return f"{repository}:{tag}"

    def _mounted_changes(self) -> dict[str, str]:
        """Base64 contents of the engine-mounted files that a command wrote to (mtime after the start)."""
        self.container.reload()
        started = _epoch(self.container.attrs["State"]["StartedAt"])
        res = self.run(_MOUNTED_SCRIPT, timeout=30, output_limit=1 << 20)
        if res.exit_code != 0:
            raise SandboxError(f"{self.task.id}: could not read the engine-mounted files: {res.output.strip()[-300:]}")
        out = {}
        for line in res.output.splitlines():
            path, mtime, data = (line.split(" ", 2) + ["", ""])[:3]
            try:
                written = float(mtime) > started
            except ValueError:  # a `date` without %N or -r: keep the file rather than lose a change
                written = True
            if path in MOUNTED and written:
                out[path] = data
        return out

    def write_mounted(self, files: dict[str, str]) -> None:
        """Write saved contents (base64) back over the engine-mounted files of a restored session."""
        script = "; ".join(f"printf %s {data} | base64 -d > {path} || exit 1"
                           for path, data in sorted(files.items()) if path in MOUNTED and set(data) <= _B64)
        res = self.run(script, timeout=30)
        if res.exit_code != 0:
            raise SandboxError(f"{self.task.id}: could not restore {', '.join(files)}: {res.output.strip()[-300:]}")

    # --- verification ---------------------------------------------------------------------

    def _put_tests(self, step: TaskStep | None = None) -> None:
        """An empty /logs/verifier and a fresh /tests holding the task's tests (run-tests.sh for TB1);
        for a step of a multi-step task, the step's tests/ copied over them (its test.sh wins)."""
        task = self.task
        extra = {"run-tests.sh": task.test_script} if task.layout == "terminal-bench" else {}
        res = self.run("rm -rf /tests /logs/verifier && mkdir -p /logs/verifier /tests && chmod 777 /logs/verifier",
                       timeout=30)
        if res.exit_code != 0:
            raise SandboxError(f"could not reset /tests and /logs/verifier: {res.output.strip()[-400:]}")
        self.container.put_archive("/", _tree_tar(task.tests_dir, "tests", extra))
        if step is not None and step.tests_dir is not None:
            self.container.put_archive("/", _tree_tar(step.tests_dir, "tests", {}))

    def verify(self, step: TaskStep | None = None) -> VerifyResult:
        """Verify the task, or (multi-step tasks) one of its steps with that step's tests and timeout."""
        return run_verifier(self, self._put_tests, step)

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
