"""What sandboxes of this process hold on the host, so that a run can prove it leaves nothing behind.

`census()` lists, for this process only (other runs on a shared machine are not counted): its
containers (label `mirl.owner`), its bwrap and local temp dirs, its pids/memory cgroups, the
mounts of any of those dirs in the host's mount namespace, loop devices backed by files in them
(a bwrap session's bounded disk), the processes it started (descendants,
and anything inside its cgroups), and its open file descriptors. `leaked(before, after)` names
what the second census holds that the first did not; the soak benchmark and the reliability tests
diff a census taken before a batch of sessions with one taken after all of them closed.
"""

from __future__ import annotations

import gc
import os
import tempfile
import time
from dataclasses import dataclass, fields
from pathlib import Path

from mirl.sandbox import loop_disk
from mirl.sandbox.owner import owner_id

TEMP_PREFIXES = ("mirl-bwrap-", "mirl-local-")
CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/memory"))


@dataclass(frozen=True)
class Census:
    containers: frozenset[str]  # "<id> <name> <status>" of containers labelled with this process as owner
    temp_dirs: frozenset[str]  # session temp dirs (bwrap: owned by this process; local: any)
    cgroups: frozenset[str]  # cgroup-v1 groups named after this process
    mounts: frozenset[str]  # host mounts of paths under a session temp dir
    loops: frozenset[str]  # "<loop device> <backing file>" of devices backed by a file in a session temp dir
    processes: frozenset[str]  # "<pid> <command>" of descendants and of processes in this process's cgroups
    fds: frozenset[str]  # "<fd> -> <target>" open in this process, sockets aside
    sockets: int = 0  # open sockets: counted, not named (an engine client's pool reuses and replaces them)

    def counts(self) -> dict[str, int]:
        return {f.name: len(v) if isinstance(v := getattr(self, f.name), frozenset) else v for f in fields(self)}


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        tree.setdefault(ppid, []).append(int(name))
    return tree


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return "?"
    text = b" ".join(a for a in args if a).decode(errors="replace")
    if not text:  # a zombie or a kernel thread: the name from stat
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            text = stat[stat.index(b"(") + 1 : stat.rindex(b")")].decode(errors="replace") + " <defunct>"
        except OSError:
            return "?"
    return text[:120]


def _processes(groups: list[Path], ignore: set[int]) -> frozenset[str]:
    """Descendants of this process and every process inside `groups` (cgroup dirs)."""
    me, tree = os.getpid(), _children()
    found: set[int] = set()
    stack = list(tree.get(me, []))
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(tree.get(pid, []))
    for group in groups:
        try:
            found.update(int(p) for p in (group / "cgroup.procs").read_text().split())
        except (OSError, ValueError):
            pass
    return frozenset(f"{pid} {_command(pid)}" for pid in sorted(found - ignore))


def _containers(client, owner: str) -> frozenset[str]:
    if client is None:
        return frozenset()
    found = client.containers.list(all=True, filters={"label": f"mirl.owner={owner}"})
    return frozenset(f"{c.short_id} {c.name} {c.status}" for c in found)


def _owned(d: Path, owner: str) -> bool:
    """A session temp dir of this process: bwrap's say their owner (none yet, or lost: counted); local
    ones cannot say, so all count."""
    if not d.name.startswith("mirl-bwrap-"):
        return True
    try:
        return (d / ".mirl-owner").read_text().strip() == owner
    except OSError:
        return True


def census(client=None) -> Census:
    """This process's sandbox resources on the host now; `client`: a docker client (None: no engine)."""
    owner = owner_id()
    tmp = Path(tempfile.gettempdir())
    temp_dirs = set()
    for d in tmp.iterdir():
        if not d.name.startswith(TEMP_PREFIXES):
            continue
        if _owned(d, owner):
            temp_dirs.add(str(d))
    groups = [d for root in CGROUP_ROOTS if root.is_dir() for d in root.glob(f"mirl*_{owner}")]
    mounts = set()
    for table in ("/proc/self/mountinfo", "/proc/1/mountinfo"):
        try:
            with open(table) as f:
                mounts.update(f"{table}: {line.split()[4]}" for line in f
                              if any(p in line.split()[4] for p in (f"{tmp}/{x}" for x in TEMP_PREFIXES)))
        except OSError:
            pass
    loops = set()
    for device, name in loop_disk.attached():
        session = name[len(str(tmp)) + 1:].split("/", 1)[0] if name.startswith(f"{tmp}/") else ""
        if session.startswith(TEMP_PREFIXES) and _owned(tmp / session, owner):
            loops.add(f"{device} {name}")
    gc.collect()  # sockets and pipes of objects already dropped are closed, not counted
    fds, sockets = set(), 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the directory's own fd, closed by now
        if target.startswith("socket:"):
            sockets += 1
        else:  # a pipe by kind only: one closed and another opened under the same number is no leak
            fds.add(f"{fd} -> {target.split(':[')[0] if target.startswith('pipe:') else target}")
    return Census(_containers(client, owner), frozenset(temp_dirs), frozenset(str(g) for g in groups),
                  frozenset(mounts), frozenset(loops), _processes(groups, {os.getpid()}), frozenset(fds), sockets)


def leaked(before: Census, after: Census, socket_slack: int | None = 0) -> dict[str, list[str]]:
    """What `after` holds that `before` did not, by kind; empty when nothing leaked.

    Sockets count as leaked beyond `socket_slack` more than before (None: not checked), since an
    engine client keeps a pool of connections that grows to its size on first use."""
    out = {}
    for f in fields(Census):
        if f.name == "sockets":
            if socket_slack is not None and after.sockets > before.sockets + socket_slack:
                out["sockets"] = [f"{after.sockets - before.sockets} more open sockets ({before.sockets} -> {after.sockets})"]
            continue
        new = sorted(getattr(after, f.name) - getattr(before, f.name))
        if new:
            out[f.name] = new
    return out


def settled_leaks(before: Census, client=None, within_s: float = 10.0,
                  socket_slack: int | None = 0) -> dict[str, list[str]]:
    """`leaked(before, census())`, retried for up to `within_s` while killed processes are reaped
    and drained pipes reach EOF; what is still there at the end is a leak."""
    end = time.monotonic() + within_s
    while True:
        found = leaked(before, census(client), socket_slack)
        if not found or time.monotonic() > end:
            return found
        time.sleep(0.2)
