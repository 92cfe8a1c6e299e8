"""Host-side helpers shared by the subprocess-based backends (bwrap, local).

Three problems every such backend has, solved once:

- *Collecting output* of a command into a bounded `HeadTailBuffer` and returning as soon as the
  command's shell has exited, even when a background child still holds the output pipe open
  (`collect`). The pipe is then handed to a `Drainer` so a service that keeps logging to it does
  not die of SIGPIPE.
- *Killing a whole process tree*, background children and re-parented orphans included
  (`kill_tree`): every command carries a marker in its environment (`MIRL_CMD=<uuid>`) and runs in
  its own session, so a process is ours if its environ holds the marker or its session id is the
  command's. Scanning /proc repeatedly outlasts a fork bomb.
- *Bounding process count and memory* with cgroup-v1 `pids` and `memory` controllers when the
  host offers them (`PidsCgroup`, `MemoryCgroup`), so a fork bomb or a memory hog cannot starve
  the machine before the timeout strikes.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from mirl.sandbox.base import HeadTailBuffer
from mirl.sandbox.owner import owner_gone, owner_id

log = logging.getLogger(__name__)

MARKER_VAR = "MIRL_CMD"
READ_CHUNK = 1 << 20
# After the shell exits, keep reading what is already in the pipe for at most this long: enough
# for the tail of the output, short enough that a chatty background child cannot stall us.
DRAIN_AFTER_EXIT_S = 0.1
DRAIN_IDLE_S = 0.01


def enlarge_pipe(fd: int, size: int = 1 << 20) -> None:
    """Bigger pipe buffers make a flood cheaper to read (fewer wake-ups); best effort."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except OSError:
        pass


def collect(
    out_fd: int,
    buffer: HeadTailBuffer,
    deadline: float,
    exit_fd: int | None,
    poll_exit: Callable[[], int | None],
) -> int | None:
    """Read `out_fd` into `buffer` until the command exits (-> its exit code) or `deadline` (-> None).

    `exit_fd` becomes readable when the exit may be known (a pidfd, a control socket); `poll_exit`
    then says whether it is. EOF on the output alone does not end the wait (the shell may have
    closed its stdout), the exit does; after the exit what is already buffered is read.
    """
    sel = selectors.DefaultSelector()
    sel.register(out_fd, selectors.EVENT_READ, "out")
    if exit_fd is not None:
        sel.register(exit_fd, selectors.EVENT_READ, "exit")
    code: int | None = None
    out_open = True
    try:
        while True:
            code = poll_exit()
            if code is not None:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            wait = remaining if exit_fd is not None else min(remaining, 0.05)
            for key, _ in sel.select(wait):
                if key.data == "out":
                    chunk = _read(out_fd)
                    if chunk:
                        buffer.feed(chunk)
                    elif chunk is not None:
                        sel.unregister(out_fd)
                        out_open = False
                elif key.data == "exit" and exit_fd is not None:
                    pass  # poll_exit reads it at the top of the loop
        if out_open:
            _drain_ready(out_fd, buffer)
        return code
    finally:
        sel.close()


_scratch = threading.local()


def _read(fd: int) -> memoryview | bytes | None:
    """A chunk (valid until the next call), b"" at EOF, None when nothing is there after all.

    Reading into one reused buffer keeps a flood from allocating a fresh megabyte per read.
    """
    buf = getattr(_scratch, "buf", None)
    if buf is None:
        buf = _scratch.buf = bytearray(READ_CHUNK)
    try:
        n = os.readv(fd, [buf])
    except BlockingIOError:
        return None
    except OSError:
        return b""
    return memoryview(buf)[:n] if n else b""


def _drain_ready(fd: int, buffer: HeadTailBuffer) -> None:
    end = time.monotonic() + DRAIN_AFTER_EXIT_S
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    try:
        while time.monotonic() < end:
            if not sel.select(DRAIN_IDLE_S):
                return
            chunk = _read(fd)
            if chunk == b"":
                return
            if chunk:
                buffer.feed(chunk)
    finally:
        sel.close()


class Drainer:
    """One daemon thread that reads and discards pipes handed to it until each reaches EOF.

    A service started in the background keeps the command's output pipe; closing our end would
    kill it with SIGPIPE the next time it logs, so the pipe is drained instead.
    """

    _instance: Drainer | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        self.sel.register(self.wake_r, selectors.EVENT_READ, None)
        self.pending: list[tuple[int, Callable[[], None] | None]] = []
        self.mutex = threading.Lock()
        threading.Thread(target=self._loop, name="mirl-pipe-drainer", daemon=True).start()

    @classmethod
    def shared(cls) -> Drainer:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def adopt(self, fd: int, on_eof: Callable[[], None] | None = None) -> None:
        with self.mutex:
            self.pending.append((fd, on_eof))
        os.write(self.wake_w, b"x")

    def _loop(self) -> None:
        while True:
            for key, _ in self.sel.select():
                if key.data is None:
                    try:
                        os.read(self.wake_r, 4096)
                    except BlockingIOError:
                        pass
                    with self.mutex:
                        pending, self.pending = self.pending, []
                    for fd, cb in pending:
                        self.sel.register(fd, selectors.EVENT_READ, (cb,))
                    continue
                fd = key.fd
                try:
                    chunk = os.read(fd, READ_CHUNK)
                except OSError:
                    chunk = b""
                if not chunk:
                    self.sel.unregister(fd)
                    os.close(fd)
                    cb = key.data[0]
                    if cb:
                        cb()


# --- process trees ------------------------------------------------------------------------


def _stat_fields(stat: bytes) -> list[bytes]:
    """/proc/PID/stat's fields after "pid (comm)": state, ppid, pgrp, session, ... (comm may hold spaces
    and parens)."""
    return stat[stat.rfind(b")") + 2 :].split()


def start_ticks(pid: int, proc: str = "/proc") -> int | None:
    """When `pid` started, in clock ticks since boot (/proc/PID/stat's 22nd field); None if it is gone.
    A process's descendants start no earlier, which lets `marked_pids` pass over older processes."""
    try:
        return int(_stat_fields(_proc_file(f"{proc}/{pid}/stat", 1024))[19])
    except (OSError, ValueError, IndexError):
        return None


def marked_pids(tokens: Iterable[bytes], sids: Iterable[int] = (), proc: str = "/proc",
                since: int | None = None) -> list[int]:
    """Pids under `proc` whose environment holds one of `tokens` or whose session id is in `sids`.

    With `since` (`start_ticks` of the process every marked one descends from, such as a session's
    runner), processes that started before it are passed over without reading their environment: with
    64 sessions at once a scan meets hundreds of processes, and each environ read holds the GIL that a
    GPU engine's thread beside the sessions needs."""
    tokens, sids = set(tokens), set(sids)
    me = os.getpid()
    found = []
    for name in os.listdir(proc):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        try:
            fields = _stat_fields(_proc_file(f"{proc}/{name}/stat", 1024))  # a stat line is ~300 bytes
            if fields[0] in (b"Z", b"X"):
                continue  # already dead, waiting to be reaped
            if int(fields[3]) in sids:
                found.append(pid)
                continue
            if since is not None and int(fields[19]) < since:
                continue
            if tokens.intersection(_proc_file(f"{proc}/{name}/environ").split(b"\0")):
                found.append(pid)
        except (OSError, ValueError, IndexError):
            continue
    return found


def _proc_file(path: str, limit: int | None = None) -> bytes:
    """A /proc file's bytes (the first `limit`), by descriptor: a scan reads hundreds, and a Python file
    object for each took ~1.7x the time of the whole scan (422 processes: 11 ms against 6.5 ms)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if limit is not None:
            return os.read(fd, limit)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def marker_token(name: str, value: str) -> bytes:
    return f"{name}={value}".encode()


def kill_tree(tokens: Iterable[bytes], sids: Iterable[int] = (), max_s: float = 1.5, proc: str = "/proc",
              since: int | None = None) -> int:
    """SIGKILL every marked process; returns how many (`since`: as for `marked_pids`).

    Everything marked is first SIGSTOPped, sweep after sweep, until a sweep finds nobody new (a
    stopped process cannot fork, so a fork bomb converges); then all of them get SIGKILL. A first
    sweep that finds nobody ends it: only a marked process could start another (one that forks and exits
    while the sweep reads /proc, its child listed before the sweep got there, escapes it: the final sweep
    that used to follow could catch that child, at the cost of a second scan on every clean close).
    """
    tokens, sids = list(tokens), list(sids)
    end = time.monotonic() + max_s
    stopped: set[int] = set()
    while time.monotonic() < end:
        new = [p for p in marked_pids(tokens, sids, proc, since) if p not in stopped]
        if not new:
            if not stopped:
                return 0
            break
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
            stopped.add(pid)
    for pid in stopped | set(marked_pids(tokens, sids, proc, since)):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(stopped)


# --- cgroups ------------------------------------------------------------------------------

PIDS_ROOT = Path("/sys/fs/cgroup/pids")
MEMORY_ROOT = Path("/sys/fs/cgroup/memory")


class _Group:
    """A cgroup directory: its members, and the removal of groups whose owning run is gone."""

    def __init__(self, path: Path):
        self.path = path

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def remove(self, wait_s: float = 2.0) -> bool:
        raise NotImplementedError

    @classmethod
    def _remove_stale(cls, entries: Iterable[Path], what: str) -> int:
        stale = [p for p in set(entries) if p.is_dir() and owner_gone(p.name.rsplit("_", 1)[1])]
        for path in stale:
            log.info("removing the %s %s of a run that ended without cleaning up", what, path.name)
            cls(path).remove()
        return len(stale)


class PidsCgroup(_Group):
    """A cgroup-v1 `pids` group capping how many processes a session may have; None if unavailable."""

    ROOT, LIMIT_FILE, WHAT = PIDS_ROOT, "pids.max", "fork bombs are bounded by the timeout only"

    @classmethod
    def create(cls, name: str, limit: int) -> PidsCgroup | None:
        """A group named `name` plus its owner (this process), so `sweep_stale` can find it orphaned."""
        root = cls.ROOT
        if os.geteuid() != 0 or not (root / "cgroup.procs").exists():
            return None
        path = root / f"{name}_{owner_id()}"
        try:
            path.mkdir()
            cls._limit(path, limit)
        except OSError as e:
            log.debug("no %s cgroup (%s); %s", root.name, e, cls.WHAT)
            try:
                path.rmdir()
            except OSError:
                pass
            return None
        return cls(path)

    @classmethod
    def _limit(cls, path: Path, limit: int) -> None:
        (path / cls.LIMIT_FILE).write_text(str(limit))

    @classmethod
    def sweep_stale(cls, prefix: str = "mirl-") -> int:
        """Remove the groups (and kill the processes) whose owning process is gone; how many."""
        try:
            entries = [p for p in cls.ROOT.iterdir() if p.name.startswith(prefix) and "_" in p.name]
        except OSError:
            return 0
        return cls._remove_stale(entries, f"{cls.ROOT.name} cgroup")

    def remove(self, wait_s: float = 2.0) -> bool:
        """SIGKILL every member until the group can be removed; whether it was (within `wait_s`)."""
        end = time.monotonic() + wait_s
        while True:
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() > end:
                    log.warning("could not remove cgroup %s", self.path)
                    return False
                time.sleep(0.01)


class MemoryCgroup(PidsCgroup):
    """A cgroup-v1 `memory` group capping a session's memory (and swap, where the host accounts it):
    a memory hog is killed by the kernel inside its group instead of pushing the host into swap."""

    ROOT, LIMIT_FILE, WHAT = MEMORY_ROOT, "memory.limit_in_bytes", "memory hogs are not bounded"

    @classmethod
    def _limit(cls, path: Path, limit: int) -> None:
        (path / "memory.limit_in_bytes").write_text(str(limit))
        swap = path / "memory.memsw.limit_in_bytes"  # absent when the kernel does not account swap
        if swap.exists():
            swap.write_text(str(limit))


def cgroup2_mount(mounts: str = "/proc/self/mounts") -> Path | None:
    """Where the cgroup-v2 hierarchy is mounted (the first cgroup2 mount), or None."""
    try:
        lines = Path(mounts).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def own_cgroup2(cgroup: str = "/proc/self/cgroup") -> str | None:
    """This process's group in the cgroup-v2 hierarchy (the `0::` line), or None."""
    try:
        lines = Path(cgroup).read_text().splitlines()
    except OSError:
        return None
    return next((line[3:] for line in lines if line.startswith("0::")), None)


class SessionCgroup(_Group):
    """A cgroup-v2 group under this process's own, with no controller: it bounds nothing, but it holds
    every process of a session (its runner joins it first, children follow), so closing the session kills
    them all in one write to `cgroup.kill` (Linux 5.14+), without a scan of /proc. For hosts on cgroup v2
    alone, where `PidsCgroup` has no v1 pids controller to use (the GPU machines here: 64 sessions' scans
    at close were the largest share of the GIL the episode threads held, beside an engine that needs it).
    A group needs no controller, so the v2 rule against processes in a group with enabled children does not
    apply to this process's own group."""

    @staticmethod
    def base(mount: Path | None = None) -> Path | None:
        """The directory of this process's own group, where sessions' groups are made; None without v2."""
        mount = mount or cgroup2_mount()
        own = own_cgroup2()
        if mount is None or own is None:
            return None
        base = mount / own.lstrip("/")
        return base if (base / "cgroup.procs").exists() else None

    @classmethod
    def create(cls, name: str, mount: Path | None = None) -> SessionCgroup | None:
        """A group named `name` plus its owner (this process, so `sweep_stale` can find it orphaned), or None
        where there is no v2 hierarchy, no right to write it, or no `cgroup.kill`."""
        base = cls.base(mount) if os.geteuid() == 0 else None
        if base is None:
            return None
        path = base / f"{name}_{owner_id()}"
        try:
            path.mkdir()
        except OSError as e:
            log.debug("no cgroup-v2 session group under %s (%s)", base, e)
            return None
        if not (path / "cgroup.kill").exists():  # before 5.14: nothing to kill a group with at once
            path.rmdir()
            return None
        return cls(path)

    @classmethod
    def sweep_stale(cls, prefix: str = "mirl-", mount: Path | None = None) -> int:
        """Remove the groups (and kill the processes) whose owning process is gone; how many. Under this
        process's group and its siblings': a run's next process often gets a group of its own beside the
        last one's (a job runner's per-call groups), and the names carry their owners."""
        base = cls.base(mount) if os.geteuid() == 0 else None
        if base is None:
            return 0
        entries = []
        for parent in {base, base.parent}:
            try:
                homes = [parent] if parent == base else [d for d in parent.iterdir() if d.is_dir()]
                for home in homes:
                    entries += [p for p in home.iterdir() if p.name.startswith(prefix) and "_" in p.name]
            except OSError:
                continue
        return cls._remove_stale(entries, "cgroup")

    def remove(self, wait_s: float = 2.0) -> bool:
        """Kill every member at once (those of groups a command made inside it too) and remove the group and
        any such groups, deepest first, once empty; whether it went (within `wait_s`)."""
        end = time.monotonic() + wait_s
        try:
            (self.path / "cgroup.kill").write_text("1")
        except FileNotFoundError:
            return True
        except OSError as e:
            log.warning("could not kill the processes of cgroup %s: %s", self.path, e)
        while True:
            try:
                for below, _, _ in sorted(os.walk(self.path), key=lambda w: -len(w[0])):  # deepest first
                    os.rmdir(below)
                return True
            except FileNotFoundError:
                if not self.path.exists():
                    return True
            except OSError:  # busy until the killed processes have exited
                pass
            if time.monotonic() > end:
                log.warning("could not remove cgroup %s", self.path)
                return False
            time.sleep(0.002)
