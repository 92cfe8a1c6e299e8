"""Hostile commands: what an agent must not be able to do to the host, for every available backend.

The local backend confines nothing by design; it still must keep the host's environment out,
bound runaway output and time, and leave no process behind.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from conftest import data_task

pytestmark = pytest.mark.timeout(120)

SECRET_VAR = "MIRL_HOSTILE_SECRET"


@pytest.fixture
def session(sandbox):
    with sandbox.start(data_task("contract-basic")) as s:
        yield s


def test_writes_stay_inside(confined, tmp_path):
    host_file = tmp_path / "host.txt"
    host_file.write_text("original\n")
    probe = f"/etc/mirl-hostile-{uuid.uuid4().hex}"
    with confined.start(data_task("contract-basic")) as s:
        s.run(f"echo pwned > {host_file}; echo pwned > {probe}; rm -rf {tmp_path}")
        assert s.run(f"cat {probe}").output.strip() == "pwned"  # it could write inside ...
    assert host_file.read_text() == "original\n"  # ... and nothing reached the host
    assert not Path(probe).exists()


def test_host_home_is_not_readable(confined):
    probe = Path.home() / f".mirl-hostile-{uuid.uuid4().hex}"
    probe.write_text("host secret\n")
    try:
        with confined.start(data_task("contract-basic")) as s:
            read = s.run(f"cat {probe}")
            listing = s.run("ls -A ~ /root")
        assert "host secret" not in read.output and read.exit_code != 0
        assert probe.name not in listing.output
    finally:
        probe.unlink()


def test_host_environment_is_not_visible(sandbox, monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv(SECRET_VAR, secret)
    with sandbox.start(data_task("contract-basic")) as s:
        r = s.run("env; cat /proc/1/environ 2>/dev/null; cat /proc/self/environ")
    assert r.exit_code == 0
    assert secret not in r.output and SECRET_VAR not in r.output


def test_no_network_egress(confined):
    with confined.start(data_task("contract-basic")) as s:
        r = s.run(
            "python3 -c \"import socket; s = socket.create_connection(('1.1.1.1', 80), timeout=3); print('CONNECTED')\"",
            timeout=20,
        )
    assert "CONNECTED" not in r.output and r.exit_code != 0


def test_fork_bomb_is_bounded(sandbox):
    if sandbox.name == "local":
        from mirl.sandbox.process import PidsCgroup

        probe = PidsCgroup.create(f"mirl-probe-{uuid.uuid4().hex[:8]}", 10)
        if probe is None:
            pytest.skip("the local backend bounds fork bombs only with a cgroup-v1 pids controller (root)")
        probe.remove()
    with sandbox.start(data_task("contract-basic")) as s:
        t0 = time.monotonic()
        r = s.run("bomb() { bomb | bomb & }; bomb", timeout=4)
        assert time.monotonic() - t0 < 4 + 2
        after = s.run("echo alive", timeout=20)
        # a backend may prefix a note saying it cleared the process table; the command itself must work
        assert after.exit_code == 0 and after.output.strip().splitlines()[-1] == "alive", after.output
    assert subprocess.run(["true"]).returncode == 0, "the host can still start processes"


def test_output_flood_that_never_ends(session):
    t0 = time.monotonic()
    r = session.run("cat /dev/zero", timeout=3)
    assert r.timed_out and time.monotonic() - t0 < 3 + 2
    assert r.truncated and len(r.output) < session.config.output_limit + 200


def test_command_that_never_ends(session):
    t0 = time.monotonic()
    r = session.run("while :; do :; done", timeout=2)
    assert r.timed_out and time.monotonic() - t0 < 2 + 2
    assert session.run("echo next").output.strip() == "next"


def _host_pids_with(token: bytes) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if token in f.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


def test_daemon_left_running_is_gone_after_close(sandbox):
    token = f"MIRL_DAEMON_{uuid.uuid4().hex}=1"
    s = sandbox.start(data_task("contract-basic"))
    # setsid + nohup + double fork: the usual way to escape a shell's process group
    s.run(f"export {token}; setsid nohup sh -c 'sleep 1000 & sleep 1000' >/dev/null 2>&1 < /dev/null & sleep 0.3")
    assert _host_pids_with(token.encode())
    s.close()
    deadline = time.monotonic() + 5
    while _host_pids_with(token.encode()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _host_pids_with(token.encode())


def test_kill_all_leaves_the_host_alone(confined):
    from mirl.sandbox.base import SandboxError

    with confined.start(data_task("contract-basic")) as s:
        s.run("touch /tmp/left-behind")
        try:
            s.run("kill -9 -1; sleep 1", timeout=10)
            s.run("echo still-here", timeout=10)
        except SandboxError:
            pass  # a session may end; it must not hang or take the host with it
    assert os.getpid() and Path("/proc/1").exists()
    with confined.start(data_task("contract-basic")) as s:  # the next session starts clean
        r = s.run("ls /tmp/left-behind 2>&1 || echo clean")
        assert r.output.strip().endswith("clean")
