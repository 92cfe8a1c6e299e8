"""Bubblewrap sandboxes: no daemon, a session starts in tens of milliseconds.

Root filesystem: kernel overlayfs with the base rootfs (`user_cache_dir()/base/rootfs`) and the
task's cached layer (see `mirl.sandbox.layers`) as read-only lowers and a per-session writable
upper in a temp dir. The overlay is mounted in a private mount namespace that only the sandbox
holds, so nothing is left mounted on the host whatever happens. bwrap then adds /proc, /dev, new
pid/ipc/uts (and, unless the task may use the internet, network) namespaces, Docker's default
capability set minus CAP_MKNOD (the bounding set too: the init drops the rest), the task's
`memory_mb` as a cgroup-v1 memory limit, and dies with its parent. A task's `storage_mb` bounds the
upper layer: it lives on a sparse ext4 image of that size, loop-mounted in the same private namespace
(`mirl.sandbox.loop_disk`).

A session is ONE long-lived sandbox whose pid 1 is a tiny init (`init_script.py`): commands are
forked by it, so services the agent starts survive between commands and nothing enters the
sandbox from outside with host privileges. Process counts are capped with a cgroup-v1 `pids`
group when the host has one (a warning says when it has none).

bwrap 0.8 has no --overlay options, and copying the 1.4 GB rootfs per session is far too slow,
hence the kernel overlay. `--die-with-parent` ties the sandbox to the *thread* that started it:
start sessions from threads that outlive them (the main thread or a pool's long-lived workers).

Snapshots (`mirl.sandbox.snapshot`): `BwrapSession.snapshot()` copies the upper directory (the
session's changes, deletions as whiteouts, opaque directories as xattrs) to
`user_cache_dir()/snapshots/bwrap/<task>-<id>/upper`; `start(task, snapshot=that dir)` copies it
back as the new session's upper over the same lowers. Running processes are not in it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

from mirl.sandbox import layers, loop_disk
from mirl.sandbox.base import (
    TIMEOUT_EXIT_CODE,
    CommandResult,
    HeadTailBuffer,
    SandboxConfig,
    SandboxError,
    VerifyResult,
    refuse_steps,
    task_env,
    user_cache_dir,
    warn_unbounded_storage,
)
from mirl.sandbox.channel import Channel
from mirl.sandbox.docker_images import safe_name
from mirl.sandbox.init_script import INIT_CODE
from mirl.sandbox.loop_disk import DiskUnavailable, LoopDisk
from mirl.sandbox.owner import owner_gone, owner_id
from mirl.sandbox.prelude import join_step, prelude_argv
from mirl.sandbox.process import MARKER_VAR, MemoryCgroup, PidsCgroup, collect, enlarge_pipe
from mirl.sandbox.snapshot import META, check_task, snapshots_dir, unknown
from mirl.sandbox.verifier import PUT_TESTS, run_verifier, tar_of_tests
from mirl.tasks import Task

log = logging.getLogger(__name__)

# Docker's default capabilities without CAP_MKNOD (a device node of the host disk would be an escape).
CAPABILITIES = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_SETGID", "CAP_SETUID",
    "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL",
    "CAP_AUDIT_WRITE", "CAP_NET_RAW",
)
PIDS_LIMIT = 1024
# host-wide /proc files that root may write, read-only as in containers (sysrq-trigger reboots the host)
PROC_READ_ONLY = ("/proc/sysrq-trigger",)
START_TIMEOUT_S = 15.0
TMP_PREFIX, OWNER_FILE, PARTIAL_PREFIX, DROP_PREFIX = "mirl-bwrap-", ".mirl-owner", ".partial-", ".dropped-"
_swept = False
KILL_REPLY_S = 1.8  # kill_tree gives up after 1.5 s; the call must return within timeout + 2 s


_warned: set[str] = set()


def _warn_once(what: str, message: str) -> None:
    """Say once a process that the host lacks a limit (every session would repeat it)."""
    if what not in _warned:
        _warned.add(what)
        log.warning(message)


def rootfs_path() -> Path:
    return Path(user_cache_dir()) / "base" / "rootfs"


def problem() -> str | None:
    """Why the bwrap backend cannot run here (what to install or build), or None when it can."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed: `apt-get install bubblewrap`, or use --sandbox docker"
    if os.geteuid() != 0:
        return "the bwrap backend mounts an overlay and needs root; use --sandbox docker otherwise"
    rootfs = rootfs_path()
    if not (rootfs / "bin").exists():
        return f"no base root filesystem at {rootfs}: run `mirl image build` first"
    try:
        r = subprocess.run(["bwrap", "--version"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError) as e:
        return f"`bwrap --version` failed: {e}"
    if r.returncode != 0:
        return f"`bwrap --version` exited {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}"
    return None


def available() -> bool:
    """bwrap is on PATH and runs, we are root (to mount the overlay) and the base rootfs exists."""
    return problem() is None


def sweep_stale() -> None:
    """Once a process: remove the temp dirs and pids cgroups of sessions whose owner was killed.

    Their bwrap died with its parent (and the overlay with its mount namespace); what a SIGKILL
    leaves are the session's temp dir (the overlay's upper layer) and its empty cgroup."""
    global _swept
    if _swept:
        return
    _swept = True
    for d in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*"):
        try:
            owner = (d / OWNER_FILE).read_text().strip()
        except OSError:
            continue
        if owner_gone(owner):
            log.info("removing %s, left by a run that ended without cleaning up", d)
            for device in loop_disk.stale_devices(d):  # killed before its disk's autoclear was set
                loop_disk.detach(device)
            shutil.rmtree(d, ignore_errors=True)
    for d in snapshots_dir("bwrap").glob(f"{PARTIAL_PREFIX}*"):  # snapshots whose save was cut short
        try:
            owner = (d / OWNER_FILE).read_text().strip()
        except OSError:
            continue
        if owner_gone(owner):
            log.info("removing %s, a snapshot left half-written by a run that ended", d)
            shutil.rmtree(d, ignore_errors=True)
    for d in snapshots_dir("bwrap").glob(f"{DROP_PREFIX}*"):  # dropped snapshots whose delete was cut short
        shutil.rmtree(d, ignore_errors=True)
    PidsCgroup.sweep_stale()
    MemoryCgroup.sweep_stale()


def bounded_disk(task: Task, tmp: Path) -> LoopDisk | None:
    """The session's disk of `storage_mb` (mirl.sandbox.loop_disk), or None when the task names no size or
    the host cannot give one (then a warning, once, says disk use is unbounded and why)."""
    if task.storage_mb is None:
        return None
    try:
        return LoopDisk.create(tmp / "disk.img", task.storage_mb)
    except DiskUnavailable as e:
        warn_unbounded_storage(task, "bwrap", reason=str(e))
        return None


def copy_tree(src: Path, dest: Path) -> None:
    """Copy an overlay upper directory exactly: whiteouts (device nodes), xattrs, owners, modes, links."""
    r = subprocess.run(["cp", "-a", "--reflink=auto", str(src), str(dest)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SandboxError(f"copying {src} to {dest} failed: {(r.stderr or r.stdout).strip()[-400:]}")


def _require() -> Path:
    if shutil.which("bwrap") is None:
        raise SandboxError("bubblewrap is not installed: `apt-get install bubblewrap`, or use --sandbox docker")
    if os.geteuid() != 0:
        raise SandboxError("the bwrap backend mounts an overlay and needs root; use --sandbox docker otherwise")
    rootfs = rootfs_path()
    if not (rootfs / "bin").exists():
        raise SandboxError(f"no base root filesystem at {rootfs}: run `mirl image build` first")
    return rootfs


# --- mounting the overlay in a private mount namespace (in bwrap's process, before it execs) ----------


def _overlay_steps(options: bytes, merged: bytes, cgroups: list[PidsCgroup], disk: tuple[bytes, bytes] | None):
    """`mirl.sandbox.prelude` steps: a private mount namespace, the session's disk (if any) and the
    overlay on `merged`, then the cgroups; bwrap, exec'd after them, binds `merged` as the root."""
    steps: list[tuple] = [("unshare",)]
    if disk is not None:  # the bounded disk the upper layer lives on (mirl.sandbox.loop_disk)
        device, layer = disk
        steps.append(("mount", device, layer, b"ext4", 0, None, "mount the session's disk"))
        steps += [("mkdirs", layer + b"/" + sub) for sub in (b"upper", b"work")]
    steps.append(("mount", b"overlay", merged, b"overlay", 0, options, "mount overlay"))
    return steps + [join_step(c) for c in cgroups]


class Box:
    """One running bwrap sandbox and its init; `exec` runs a command in it."""

    def __init__(
        self,
        lowers: list[Path],
        workdir: Path,
        binds: list[tuple[Path, str]] = (),
        network: bool = False,
        base_env: dict[str, str] | None = None,
        hostname: str = "sandbox",
        memory_mb: int | None = None,
        disk: LoopDisk | None = None,
    ):
        self.dir = workdir
        self.base_env = base_env or {}
        self.lock = threading.Lock()
        self.closed = False
        self.proc: subprocess.Popen | None = None
        self.next_id = 0
        self.disk = disk
        # the writable layer: on the session's bounded disk when it has one, else in its temp dir
        self.layer = workdir / "disk" if disk is not None else workdir
        upper, work, merged = self.layer / "upper", self.layer / "work", workdir / "root"
        for d in (merged,) if disk is not None else (upper, work, merged):
            d.mkdir(parents=True, exist_ok=True)
        self.layer.mkdir(exist_ok=True)
        self.cgroup = self.memory = self.chan = None
        try:
            self._start(lowers, workdir, binds, network, hostname, memory_mb, disk, upper, work, merged)
        except BaseException:  # nothing of a half-started sandbox outlives it: cgroups, socket, bwrap, disk
            self.close()
            raise

    def _start(self, lowers, workdir, binds, network, hostname, memory_mb, disk, upper, work, merged) -> None:
        options = f"lowerdir={':'.join(str(p) for p in lowers)},upperdir={upper},workdir={work}".encode()
        name = f"mirl-{uuid.uuid4().hex[:12]}"
        self.cgroup = PidsCgroup.create(name, PIDS_LIMIT)
        if self.cgroup is None:
            _warn_once("pids", f"this host gives no cgroup-v1 pids controller at {PidsCgroup.ROOT}: a fork bomb in a "
                       "bwrap sandbox is bounded by the command timeout only")
        self.memory = MemoryCgroup.create(name, int(memory_mb) << 20) if memory_mb is not None else None
        if memory_mb is not None and self.memory is None:
            _warn_once("memory", f"this host gives no cgroup-v1 memory controller at {MemoryCgroup.ROOT}: the tasks' "
                       "memory_mb is not enforced in bwrap sandboxes")
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.chan = Channel(host, "the sandbox")
        args = ["bwrap", "--bind", str(merged), "/", "--proc", "/proc", "--dev", "/dev"]
        # bwrap does not always cover /proc/sys; its knobs are host-wide (vm.drop_caches, kernel.*)
        args += ["--ro-bind", "/proc/sys", "/proc/sys"]
        for path in PROC_READ_ONLY:  # where the kernel has them (a fresh /proc would make them writable)
            if os.path.exists(path):
                args += ["--ro-bind", path, path]
        for src, dest in binds:
            args += ["--ro-bind", str(src), dest]
        args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", hostname]
        if not network:
            args.append("--unshare-net")
        args += ["--die-with-parent", "--new-session", "--as-pid-1", "--clearenv", "--setenv", "PATH", layers.DEFAULT_PATH]
        args += ["--cap-drop", "ALL"]
        for cap in CAPABILITIES:
            args += ["--cap-add", cap]
        args += ["--chdir", "/", "/usr/bin/python3", "-I", "-S", "-c", INIT_CODE, str(child.fileno())]
        self.log_path = workdir / "bwrap.log"
        try:
            with open(self.log_path, "wb") as errlog:
                steps = _overlay_steps(options, str(merged).encode(),
                                       [c for c in (self.cgroup, self.memory) if c is not None],
                                       (disk.device.encode(), str(self.layer).encode()) if disk else None)
                self.proc = subprocess.Popen(  # no preexec_fn: a vfork, the GIL stays free (see prelude.py)
                    prelude_argv(steps, args),
                    stdin=subprocess.DEVNULL,
                    stdout=errlog,
                    stderr=errlog,
                    pass_fds=(child.fileno(),),
                    start_new_session=True,
                )
        finally:
            child.close()
        ready = self.chan.wait_for(lambda m: m["op"] == "ready", START_TIMEOUT_S)
        if disk is not None:  # mounted in the sandbox's namespace now (or never): it holds the device
            disk.release()
        if ready is None:
            try:  # a prelude step that failed has written why and exits
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
            detail = self._log_tail()
            if "mirl-prelude:" in detail:
                what = "the session's disk or the overlay" if disk is not None else "the overlay"
                raise SandboxError(f"could not start the sandbox (mounting {what} failed: {detail}); is overlayfs "
                                   "available?")
            raise SandboxError(f"the bwrap sandbox did not start: {detail or 'no output'}")

    @property
    def upper(self) -> Path:
        """The upper directory as the host can read it: a bounded disk is mounted only in the sandbox's
        namespace, which bwrap's own process is in."""
        if self.disk is None or self.proc is None:
            return self.layer / "upper"
        return Path(f"/proc/{self.proc.pid}/root") / os.path.realpath(self.layer).lstrip("/") / "upper"

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-800:].strip()
        except OSError:
            return ""

    # --- commands ---

    def exec(
        self,
        command: str,
        timeout: float,
        output_limit: int,
        cwd: str = "/",
        env: dict[str, str] | None = None,
        stdin_fd: int | None = None,
    ) -> CommandResult:
        with self.lock:
            if self.closed:
                raise SandboxError("the session is closed")
            self.next_id += 1
            cid, marker = self.next_id, uuid.uuid4().hex
            full_env = {**self.base_env, **(env or {}), MARKER_VAR: marker}
            r, w = os.pipe()
            enlarge_pipe(w)
            started = time.monotonic()
            try:
                fds = [w, r] + ([stdin_fd] if stdin_fd is not None else [])
                self.chan.send({"op": "run", "id": cid, "argv": ["/bin/bash", "-c", command], "env": full_env, "cwd": cwd,
                                "spawn": "posix"}, fds)  # posix_spawn: no copy of the init's page tables
            finally:
                os.close(w)
            buf = HeadTailBuffer(output_limit)
            deadline = started + timeout
            gone = []

            def poll_exit() -> int | None:
                m = self.chan.take(lambda m: m["op"] == "exit" and m["id"] == cid)
                if m is not None:
                    return m["code"]
                if not self.chan.pump(0) and not gone:
                    gone.append(True)
                m = self.chan.take(lambda m: m["op"] == "exit" and m["id"] == cid)
                if m is not None:
                    return m["code"]
                return -1 if gone else None

            try:
                code = collect(r, buf, deadline, self.chan.sock.fileno(), poll_exit)
                timed_out = code is None
                if timed_out:
                    pid = self.chan.wait_for(lambda m: m["op"] == "started" and m["id"] == cid, 0.1)
                    self.chan.send({"op": "kill", "id": cid, "marker": marker, "sid": pid["pid"] if pid else None})
                    self.chan.wait_for(lambda m: m["op"] == "killed" and m["id"] == cid, KILL_REPLY_S)
                    code = TIMEOUT_EXIT_CODE
                elif code == -1:
                    buf.feed(b"\nmirl: the sandbox ended while the command ran\n")
            finally:
                if not gone:
                    try:
                        self.chan.send({"op": "release", "id": cid})
                    except SandboxError:
                        pass
                os.close(r)
                self.chan.take(lambda m: m["op"] == "started" and m["id"] == cid)
            return CommandResult(buf.text(), code, time.monotonic() - started, timed_out, buf.truncated)

    def close(self) -> None:
        if self.closed and self.proc is None:
            return
        self.closed = True
        try:
            if self.chan is not None:
                self.chan.sock.close()
        except OSError:
            pass
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, 9)
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.warning("bwrap process %d did not exit", self.proc.pid)
            self.proc = None
        for attr in ("cgroup", "memory"):
            if getattr(self, attr, None) is not None:
                getattr(self, attr).remove()
                setattr(self, attr, None)
        if self.disk is not None:
            self.disk.release()


class BwrapSession:
    """A task running in a Box: commands in WORKDIR with the task's ENV, verify, close."""

    def __init__(self, task: Task, config: SandboxConfig, lowers: list[Path], workdir: str, env: dict[str, str],
                 upper: Path | None = None):
        self.task, self.config = task, config
        self.workdir = workdir
        self.lowers = lowers
        self.tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
        (self.tmp / OWNER_FILE).write_text(owner_id())  # lets a later run sweep it if this one is killed
        network = bool(config.allow_internet and task.allow_internet)
        base_env = {"PATH": layers.DEFAULT_PATH, "HOME": "/root", "HOSTNAME": "sandbox", **env}
        disk = None
        try:
            disk = bounded_disk(task, self.tmp)
            if upper is not None:  # a snapshot's upper directory: the new session's changes start from it
                if disk is None:
                    copy_tree(upper, self.tmp / "upper")
                else:
                    (self.tmp / "disk").mkdir()
                    r = disk.run_mounted(self.tmp / "disk", ["cp", "-a", "--reflink=auto", str(upper),
                                                             str(self.tmp / "disk" / "upper")])
                    if r.returncode != 0:
                        raise SandboxError(f"copying snapshot {upper} onto the session's {task.storage_mb} MB disk "
                                           f"failed: {(r.stderr or r.stdout).strip()[-400:]}")
            self.box = Box(lowers, self.tmp, network=network, base_env=base_env, memory_mb=task.memory_mb, disk=disk)
        except BaseException:
            if disk is not None:
                disk.release()
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise

    def run(self, command: str, timeout: float | None = None, env: dict[str, str] | None = None) -> CommandResult:
        timeout = self.config.command_timeout_s if timeout is None else timeout
        return self.box.exec(command, timeout, self.config.output_limit, self.workdir, env)

    def _put_tests(self) -> None:
        """Copy the task's tests to /tests through a tar stream, extracted inside the sandbox."""
        with tar_of_tests(self.task) as f:
            res = self.box.exec(PUT_TESTS, 60, 4000, "/", None, f.fileno())
        if res.exit_code != 0:
            raise SandboxError(f"could not copy the tests into the sandbox: {res.output.strip()[-400:]}")

    def read_file(self, path: str) -> str | None:
        res = self.box.exec(f"cat -- {path} 2>/dev/null || exit 3", 30, 100_000)
        return res.output if res.exit_code == 0 else None

    def verify(self) -> VerifyResult:
        return run_verifier(self, self._put_tests)

    def snapshot(self) -> str:
        """Copy the session's upper directory under the cache and return that directory (see
        `mirl.sandbox.snapshot`). Files only: the processes that run now are not saved."""
        if self.box.closed:
            raise SandboxError("the session is closed")
        root = snapshots_dir("bwrap")
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o700)  # the sandbox's files (setuid ones too) are no business of other host users
        name = f"{safe_name(self.task.id)}-{uuid.uuid4().hex[:12]}"
        partial = root / f"{PARTIAL_PREFIX}{name}"
        partial.mkdir()
        try:
            (partial / OWNER_FILE).write_text(owner_id())  # swept if this run dies mid-copy
            with self.box.lock:  # no command of ours writes while the copy runs
                copy_tree(self.box.upper, partial / "upper")
            meta = {"backend": "bwrap", "task": self.task.id, "lowers": [str(p) for p in self.lowers],
                    "created": round(time.time(), 3)}
            (partial / META).write_text(json.dumps(meta, indent=1) + "\n")
            (partial / OWNER_FILE).unlink()
            final = root / name
            os.rename(partial, final)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return str(final)

    def close(self) -> None:
        box = getattr(self, "box", None)
        if box is not None:
            box.close()
        if self.tmp.exists():
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> BwrapSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class BwrapSandbox:
    name = "bwrap"

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig(backend="bwrap")

    def start(self, task: Task, snapshot: str | None = None) -> BwrapSession:
        """A fresh session on the task's layer, or on a snapshot of it (`BwrapSession.snapshot`)."""
        rootfs = _require()
        sweep_stale()
        meta = None
        if snapshot is not None:
            meta = self._snapshot_meta(snapshot)
            check_task(meta, snapshot, self.name, task.id)
        refuse_steps(task, self.name)
        extra_env = task_env(task)
        plan = layers.plan(task)
        if plan.base_image:
            log.info("task %s: FROM %s is substituted by the base root filesystem %s", task.id, plan.base_image, rootfs)
        layer = ensure_layer(task, rootfs, plan)
        lowers = [layer, rootfs]
        if meta is not None and meta.get("lowers") != [str(p) for p in lowers]:
            raise SandboxError(f"snapshot {snapshot!r} was taken over {meta.get('lowers')}, but task {task.id} now "
                               f"starts from {[str(p) for p in lowers]} (its Dockerfile or the base rootfs changed): "
                               "take the snapshot again")
        upper = Path(snapshot) / "upper" if snapshot is not None else None
        return BwrapSession(task, self.config, lowers, plan.workdir, {**plan.env, **extra_env}, upper=upper)

    # --- snapshots (see mirl.sandbox.snapshot) ----------------------------------------------

    def _snapshot_meta(self, handle: str) -> dict:
        """The metadata of snapshot directory `handle`; SandboxError when it is no snapshot of ours."""
        if not isinstance(handle, str) or not handle:
            raise unknown(handle, self.name, "bwrap snapshots are directories under "
                          f"{snapshots_dir('bwrap')}")
        path = Path(handle)
        try:
            meta = json.loads((path / META).read_text())
        except FileNotFoundError:
            raise unknown(handle, self.name, f"no {META} there (dropped, or not a bwrap snapshot directory)") from None
        except (OSError, ValueError) as e:
            raise unknown(handle, self.name, f"{path / META} is unreadable: {e}") from None
        if not isinstance(meta, dict) or meta.get("backend") != "bwrap" or not (path / "upper").is_dir():
            raise unknown(handle, self.name, f"{path} is not a bwrap snapshot (no upper directory or wrong {META})")
        return meta

    def list_snapshots(self, task: str | None = None) -> list[str]:
        """Handles of the finished snapshots under the cache (of task id `task` only, when given)."""
        out = []
        for d in snapshots_dir("bwrap").glob("*"):
            try:
                meta = json.loads((d / META).read_text()) if not d.name.startswith(".") else None
            except (OSError, ValueError):
                continue
            if isinstance(meta, dict) and (task is None or meta.get("task") == task):
                out.append(str(d))
        return sorted(out)

    def drop_snapshot(self, handle: str) -> None:
        """Delete a snapshot directory; SandboxError when `handle` is none. Sessions started from it
        are unaffected (they hold their own copy)."""
        self._snapshot_meta(handle)
        path = Path(handle)
        trash = path.parent / f"{DROP_PREFIX}{path.name}-{uuid.uuid4().hex[:6]}"
        os.rename(path, trash)  # at once no snapshot; a delete cut short is finished by the next sweep
        shutil.rmtree(trash, ignore_errors=True)

    def prune_snapshots(self, keep=(), task: str | None = None) -> list[str]:
        """Drop every snapshot (of task id `task`, when given) not in `keep`; returns the dropped handles."""
        keep = {str(k) for k in keep}
        dropped = [h for h in self.list_snapshots(task) if h not in keep]
        for h in dropped:
            self.drop_snapshot(h)
        return dropped


# --- cached per-task layers ---------------------------------------------------------------

_installed: dict[str, tuple[set[str], set[str]]] = {}


def ensure_layer(task: Task, rootfs: Path, plan: layers.Plan | None = None) -> Path:
    """The task's layer directory, built once (RUN lines included) and reused by every session."""
    key = layers.layer_key(task, rootfs)
    root = Path(user_cache_dir()) / "bwrap" / "layers"
    final = root / key
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_dir():
            return final
        plan = plan or layers.plan(task)
        if str(rootfs) not in _installed:
            _installed[str(rootfs)] = (layers.installed_apt(rootfs), layers.installed_pip(rootfs))
        apt, pip = _installed[str(rootfs)]
        script = layers.build_script(task, plan, apt, pip)  # refuses installs before anything starts
        build = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
        try:
            binds = [(task.dockerfile.parent.resolve(), layers.CONTEXT_MOUNT)] if task.dockerfile else []
            box = Box([rootfs], build, binds=binds, base_env={"PATH": layers.DEFAULT_PATH, "HOME": "/root"})
            try:
                res = box.exec(script, task.build_timeout_s, 20_000)
            finally:
                box.close()
            if res.exit_code != 0:
                raise SandboxError(
                    f"task {task.id}: building its files from the Dockerfile failed "
                    f"(exit {res.exit_code}{', timed out' if res.timed_out else ''}):\n{res.output.strip()[-1500:]}"
                )
            shutil.rmtree(build / "upper" / layers.CONTEXT_MOUNT.strip("/").split("/")[0], ignore_errors=True)
            os.rename(build / "upper", final)
            log.info("task %s: built layer %s in %.1fs", task.id, key, res.duration_s)
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return final
