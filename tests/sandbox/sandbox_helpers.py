"""Helpers for the sandbox tests: bundled test tasks and host-side probes of sandboxed processes.

A module of its own name (not conftest) so that `from sandbox_helpers import ...` finds it
whichever other test directories' conftest modules pytest has loaded in the same run.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from mirl.tasks import load_task

DATA = Path(__file__).resolve().parents[1] / "data" / "tasks"


def data_task(name: str):
    return load_task(DATA / name)


def host_pids_with(token: str) -> list[int]:
    """Host pids whose environment holds `token` (sandboxed processes are host processes too)."""
    needle, found = token.encode(), []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                pass
    return found


def wait_until_gone(token: str, within_s: float = 15) -> list[int]:
    """Host pids still holding `token` after waiting up to `within_s` for them to end."""
    deadline = time.monotonic() + within_s
    while (left := host_pids_with(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


class PeakCount(threading.Thread):
    """Samples `len(host_pids_with(token))` until stopped; `peak` is the largest count seen."""

    def __init__(self, token: str):
        super().__init__(daemon=True)
        self.token, self.peak, self.stopped = token, 0, threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.peak = max(self.peak, len(host_pids_with(self.token)))
            self.stopped.wait(0.05)

    def stop(self) -> int:
        self.stopped.set()
        self.join(10)
        return self.peak


def flood_in_fresh_process(backend: str, command: str, output_limit: int, use_pid1: bool = True) -> dict:
    """Run `command` in a session of `backend` inside a fresh interpreter (see flood_probe.py).

    A fresh process, so that its peak RSS (`ru_maxrss`, which only grows) starts at a known
    baseline: in the test process itself earlier tests would already have raised it past any bound.
    """
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
    args = [sys.executable, str(Path(__file__).with_name("flood_probe.py")), backend, command, str(output_limit),
            "pid1" if use_pid1 else "exec"]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def cgroup2_hierarchy(root: Path):
    """The cgroup-v2 hierarchy at `root` for the test, unmounted after with the test's groups removed. Where
    the host has it mounted already it is bound here (a fresh mount would set the one hierarchy's options,
    e.g. drop a systemd host's `nsdelegate`); on a cgroup-v1 host it is mounted, with no controller. Skips
    where it cannot be had: not root, a container that may not mount, or a kernel without `cgroup.kill`
    (before 5.14)."""
    import pytest

    from mirl.sandbox.process import SessionCgroup, cgroup2_mount

    if os.geteuid() != 0:
        pytest.skip("cgroups are written by root")
    root.mkdir(parents=True, exist_ok=True)
    host = cgroup2_mount()
    cmd = ["mount", "--bind", str(host), str(root)] if host else ["mount", "-t", "cgroup2", "none", str(root)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no cgroup-v2 hierarchy to test on: {' '.join(cmd)}: {done.stderr.strip()[:200]}")
    try:
        trial = SessionCgroup.create("mirl-trial", mount=root)
        if trial is None:
            pytest.skip("this kernel's cgroup v2 has no cgroup.kill (Linux < 5.14)")
        trial.remove()
        yield root
    finally:
        base = SessionCgroup.base(root)
        for home in {root, base} - {None}:
            for group in home.iterdir():
                if group.is_dir() and group.name.startswith("mirl-"):
                    SessionCgroup(group).remove()
        subprocess.run(["umount", str(root)], check=False, capture_output=True)
