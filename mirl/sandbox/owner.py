"""Which process owns a sandbox resource, recorded so that a later run can tell the owner is gone.

A run killed with SIGKILL cleans nothing up. Each container, bwrap temp dir and pids cgroup
records its owner (`owner_id()`); the next run sweeps those whose owner no longer runs. An owner
is judged only on the machine and pid namespace it ran in (boot id and pid namespace match):
anything else, e.g. a container of another machine on a shared engine, is left alone.
"""

from __future__ import annotations

import os
from functools import lru_cache


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2:].split()[19].decode()  # fields after the command name


@lru_cache(maxsize=1)
def _here() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        ns = os.readlink("/proc/self/ns/pid").strip("pid:[]")
    except OSError:
        return "unknown.unknown"
    return f"{boot}.{ns}"


def owner_id(pid: int | None = None) -> str:
    """`<boot id>.<pid namespace>.<pid>.<start time>` of this process (or of `pid`)."""
    pid = os.getpid() if pid is None else pid
    return f"{_here()}.{pid}.{_start_time(pid)}"


def owner_gone(owner: str) -> bool:
    """True when `owner` (an `owner_id()`) ran here and that process no longer runs."""
    try:
        boot, ns, pid, start = owner.rsplit(".", 3)
    except ValueError:
        return False
    if f"{boot}.{ns}" != _here() or "unknown" in boot:
        return False
    return _start_time(int(pid)) != start
