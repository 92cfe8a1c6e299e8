"""Hostile commands: what an agent must not be able to do to the host, for every available backend.

The local backend confines nothing by design; it still must keep the host's environment out,
bound runaway output and time, and leave no process behind.
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from sandbox_helpers import PeakCount, data_task, host_pids_with, wait_until_gone

from mirl.sandbox.base import TIMEOUT_EXIT_CODE

pytestmark = pytest.mark.timeout(120)

PIDS_LIMIT = 1024  # every backend's cap on a session's processes
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
        assert listing.exit_code == 0 and probe.name not in listing.output
    finally:
        probe.unlink()


def test_host_environment_is_not_visible(sandbox, monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv(SECRET_VAR, secret)
    with sandbox.start(data_task("contract-basic")) as s:
        r = s.run("env; cat /proc/1/environ 2>/dev/null; cat /proc/self/environ")
    assert r.exit_code == 0 and "PATH=" in r.output  # the probe did print an environment
    assert secret not in r.output and SECRET_VAR not in r.output


def _host_addresses() -> list[str]:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines()]


CONNECT = """python3 -c "
import socket, sys
for host in sys.argv[2:]:
    try:
        socket.create_connection((host, int(sys.argv[1])), timeout=3).close()
        print('CONNECTED', host)
    except OSError as e:
        print('BLOCKED', host, type(e).__name__)
" """


def test_no_network_egress(confined):
    """A port the host listens on, which answers the host on each of its addresses, is unreachable inside."""
    server = socket.create_server(("0.0.0.0", 0))
    port, hosts = server.getsockname()[1], _host_addresses()
    try:
        for host in hosts:  # the control: these addresses do answer, outside the sandbox
            socket.create_connection((host, port), timeout=3).close()
        with confined.start(data_task("contract-basic")) as s:
            r = s.run(CONNECT + f"{port} " + " ".join(hosts), timeout=30)
    finally:
        server.close()
    assert "127.0.0.1" in hosts and len(hosts) >= 2, hosts
    assert [line.split()[:2] for line in r.output.splitlines()] == [["BLOCKED", h] for h in hosts], r.output


def test_fork_bomb_is_bounded_and_killed_on_timeout(sandbox):
    if sandbox.name == "local":
        from mirl.sandbox.process import PidsCgroup

        probe = PidsCgroup.create(f"mirl-probe-{uuid.uuid4().hex[:8]}", 10)
        if probe is None:
            pytest.skip("the local backend bounds fork bombs only with a cgroup-v1 pids controller (root)")
        probe.remove()
    token = f"MIRL_BOMB={uuid.uuid4().hex}"
    counter = PeakCount(token)
    with sandbox.start(data_task("contract-basic")) as s:
        counter.start()
        t0 = time.monotonic()
        # in the environment a shell is exec'd with, which its forked subshells keep (`export` would not show)
        r = s.run(f"env {token} bash -c 'bomb() {{ bomb | bomb; }}; bomb'", timeout=4)  # forks until the timeout
        elapsed = time.monotonic() - t0
        left = wait_until_gone(token)
        peak = counter.stop()
        after = s.run("echo alive", timeout=20)
    assert (r.timed_out, r.exit_code) == (True, TIMEOUT_EXIT_CODE), r.output[-500:]
    assert 4 <= elapsed < 60, elapsed
    assert left == [], f"{len(left)} of the bomb's processes outlived its timeout"
    assert 100 < peak <= PIDS_LIMIT, f"peak of {peak} processes: the bomb did not run, or was not bounded"
    # a backend may prefix a note saying it cleared the process table; the command itself must work
    assert after.exit_code == 0 and after.output.strip().splitlines()[-1] == "alive", after.output


def test_output_flood_that_never_ends(session):
    t0 = time.monotonic()
    r = session.run("cat /dev/zero", timeout=3)
    assert r.timed_out and r.exit_code == TIMEOUT_EXIT_CODE and 3 <= time.monotonic() - t0 < 60
    half = session.config.output_limit // 2
    assert r.truncated and r.output.startswith("\0" * half + "\n[... ")
    assert r.output.endswith(" bytes of output elided ...]\n" + "\0" * half)


def test_command_that_never_ends(session):
    t0 = time.monotonic()
    r = session.run("while :; do :; done", timeout=2)
    assert (r.timed_out, r.exit_code) == (True, TIMEOUT_EXIT_CODE) and 2 <= time.monotonic() - t0 < 60
    assert session.run("echo next").output == "next\n"


def test_daemon_left_running_is_gone_after_close(sandbox):
    token = f"MIRL_DAEMON_{uuid.uuid4().hex}=1"
    s = sandbox.start(data_task("contract-basic"))
    # setsid + nohup + double fork: the usual way to escape a shell's process group
    s.run(f"export {token}; setsid nohup sh -c 'sleep 1000 & sleep 1000' >/dev/null 2>&1 < /dev/null & sleep 0.3")
    assert len(host_pids_with(token)) == 3, "setsid sh and its two sleeps run before close"
    s.close()
    assert wait_until_gone(token) == []


def test_kill_all_leaves_the_host_and_the_session_alone(confined):
    bystander = subprocess.Popen(["sleep", "600"])  # a host process that `kill -9 -1` would reach unconfined
    try:
        with confined.start(data_task("contract-basic")) as s:
            s.run("sleep 500 & touch /tmp/left-behind")
            s.run("kill -9 -1; sleep 1", timeout=10)
            after = s.run("echo still-here; ps -eo args", timeout=10)
        assert bystander.poll() is None, "kill -9 -1 inside the sandbox killed a host process"
    finally:
        bystander.kill()
        bystander.wait()
    assert after.exit_code == 0 and after.output.startswith("still-here\n"), after.output
    assert "sleep 500" not in after.output  # it did kill what ran inside
    with confined.start(data_task("contract-basic")) as s:  # the next session starts clean
        r = s.run("ls /tmp/left-behind 2>&1 || echo clean")
        assert r.output.strip().endswith("clean")
