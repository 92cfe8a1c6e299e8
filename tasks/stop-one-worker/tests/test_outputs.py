"""worker-a is gone; the processes originally started for everything else are still alive."""
import os
from pathlib import Path

STATE = Path("/var/lib/workers/started")
KEEP = ["worker-ab", "worker-a-canary", "worker-b", "monitor"]


def alive(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a killed child of PID 1 stays a zombie


def live_worker_names():
    names = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if alive(pid) and any(a.endswith(b"worker.py") for a in argv) and b"--name" in argv:
            names.append(argv[argv.index(b"--name") + 1].decode())
    return names


def first_started():
    assert STATE.is_file(), "the workers were never started"
    first = {}
    for line in STATE.read_text().splitlines():
        name, pid = line.split()
        first.setdefault(name, int(pid))
    return first


def test_worker_a_stopped():
    started = first_started()
    assert not alive(started["worker-a"])
    assert "worker-a" not in live_worker_names()


def test_others_still_running_as_original_processes():
    started = first_started()
    for name in KEEP:
        assert alive(started[name]), f"{name} (pid {started[name]}) is not running"


def test_no_duplicates_started():
    assert sorted(live_worker_names()) == sorted(KEEP[:3])
