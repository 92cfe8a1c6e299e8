"""Escape attempts against every confining backend (docker, bwrap): each one is a real attempt from
inside a session, asserted to fail with the host's canary, secret or service untouched, and every
test ends with a census of the host (`mirl.sandbox.leaks`) that must find nothing left behind.

The local backend confines nothing by design (throwaway machines only): it runs only the tests
about processes (SIGTERM-ignoring children, zombies) and the environment, which it must still
keep; the file, device, network and socket attempts would simply succeed there.

Attempts the sandbox suite already makes (tests/sandbox/test_hostile.py: writing a host file,
reading the host's home, the host environment, egress to the host's addresses, fork bombs, output
floods, `kill -9 -1`, daemons at close) are not repeated; these extend them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from mirl.sandbox.leaks import census, settled_leaks
from tests.sandbox.sandbox_helpers import data_task, host_pids_with, wait_until_gone

pytestmark = pytest.mark.timeout(180)

CONFINING = ("docker", "bwrap")
CAP_SYS_ADMIN, CAP_MKNOD, CAP_SYS_MODULE, CAP_SYS_PTRACE, CAP_SYS_RAWIO = 21, 27, 16, 19, 17


def _backend(request, name: str):
    if name == "docker":
        return request.getfixturevalue("docker_sandbox")
    if name == "bwrap":
        return request.getfixturevalue("bwrap_sandbox")
    from mirl.sandbox.local_backend import LocalSandbox

    return LocalSandbox()


@pytest.fixture(params=CONFINING)
def confined(request):
    """A sandbox of each confining backend; the host holds no more of its resources after the test."""
    sandbox = _backend(request, request.param)
    client = getattr(sandbox, "client", None)
    before = census(client)
    yield sandbox
    # the engine client's connection pool grows on first use: sockets are checked by the soak (after warm-up)
    assert settled_leaks(before, client, socket_slack=None if client else 0) == {}


@pytest.fixture(params=(*CONFINING, "local"))
def any_backend(request):
    """As `confined`, and the local backend too (for what every backend must keep)."""
    sandbox = _backend(request, request.param)
    client = getattr(sandbox, "client", None)
    before = census(client)
    yield sandbox
    # the engine client's connection pool grows on first use: sockets are checked by the soak (after warm-up)
    assert settled_leaks(before, client, socket_slack=None if client else 0) == {}


def _task():
    return data_task("contract-basic")  # memory_mb = 1024, no network


def _status(text: str, field: str) -> int:
    return int(next(line for line in text.splitlines() if line.startswith(field + ":")).split()[1], 16)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- privileges ---------------------------------------------------------------------------


# a copy of python3 given file capabilities (CAP_SETFCAP is in the set), run to see what it holds
FILE_CAPS = """cp "$(command -v python3)" /tmp/capped && python3 -c "
import os, struct
os.setxattr('/tmp/capped', 'security.capability', struct.pack('<IIIII', 0x02000001, {mask}, 0, 0, 0))
" && /tmp/capped -c "print(open('/proc/self/status').read())" """


def test_capability_bounding_set_is_the_reduced_set(confined):
    """No capability outside the sandbox's set can be regained: the bounding set is the effective
    set (bwrap used to keep a full bounding set), and file capabilities grant nothing more."""
    admin = (1 << CAP_SYS_ADMIN) | (1 << CAP_SYS_MODULE) | (1 << CAP_SYS_PTRACE) | (1 << CAP_SYS_RAWIO)
    with confined.start(_task()) as s:
        mine = s.run("cat /proc/self/status").output
        init = s.run("cat /proc/1/status").output
        capped = s.run(FILE_CAPS.format(mask=admin), timeout=30)
    eff, bnd = _status(mine, "CapEff"), _status(mine, "CapBnd")
    assert eff and bnd == eff, f"CapEff {eff:x}, CapBnd {bnd:x}"
    assert _status(init, "CapBnd") == bnd  # the commands' parent holds no more either
    assert not bnd & admin
    if confined.name == "bwrap":
        assert not bnd & (1 << CAP_MKNOD)
    # exec refused (the file asks beyond the bounding set), or it ran without the capabilities
    assert capped.exit_code != 0 or not _status(capped.output, "CapEff") & admin, capped.output


def test_mount_and_chroot_escapes_fail(confined, tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("host\n")
    attempts = ["mount -t tmpfs none /mnt", "mount --bind / /mnt", "mount -t proc proc /mnt",
                "mount -o remount,rw /proc/sys", "umount -l /proc", f"mount --bind {tmp_path} /mnt"]
    breakout = ("mkdir -p /tmp/jail && python3 -c \"import os\nos.chroot('/tmp/jail')\nfor _ in range(64): os.chdir('..')\n"
                f"os.chroot('.')\nprint(os.path.exists('{canary}'), sorted(os.listdir('/'))[:3])\"")
    with confined.start(_task()) as s:
        results = {a: s.run(a, timeout=20) for a in attempts}
        broke = s.run(breakout, timeout=20)
        root = s.run("python3 -c \"import os; print(sorted(os.listdir('/'))[:3])\"").output.strip()
        still = s.run("cat /proc/self/mounts").output
    for attempt, r in results.items():
        assert r.exit_code != 0, f"{attempt!r} succeeded inside: {r.output}"
    assert broke.exit_code == 0 and broke.output.strip() == f"False {root}", broke.output
    assert " /mnt " not in still and canary.read_text() == "host\n"


def test_symlinks_to_host_paths_stay_inside_and_survive_cleanup(confined, tmp_path):
    """Links the agent makes to host paths resolve inside the sandbox; nothing the host does with
    the session's files (snapshot, verify, close) follows them out."""
    canary, keep = tmp_path / "canary.txt", tmp_path / "keep"
    canary.write_text("host\n")
    keep.mkdir()
    (keep / "precious").write_text("keep me\n")
    with confined.start(_task()) as s:
        r = s.run(f"ln -s {canary} /app/link && echo pwned > /app/link; ln -sfn {keep} /tmp/keep; rm -rf /tmp/keep/*; "
                  f"ln -s /proc/1/root{canary} /app/via-proc && echo pwned > /app/via-proc; "
                  f"mkdir -p /logs/verifier && ln -s {keep} /logs/verifier/out; "
                  f"rm -rf /srv && ln -s {keep} /srv; echo done")
        assert r.output.strip().endswith("done"), r.output
        handle = s.snapshot()
        s.verify()
    confined.drop_snapshot(handle)
    assert canary.read_text() == "host\n"
    assert (keep / "precious").read_text() == "keep me\n"


def test_processes_outside_are_invisible_and_unreachable(confined):
    secret = uuid.uuid4().hex
    host = subprocess.Popen(["sleep", "300"], env={"PATH": os.environ["PATH"], "MIRL_PROBE_SECRET": secret})
    try:
        with confined.start(_task()) as s:
            r = s.run(f"cat /proc/{host.pid}/environ; tr '\\0' ' ' < /proc/{host.pid}/cmdline; "
                      f"grep -ls {secret} /proc/[0-9]*/environ; kill -9 {host.pid}; ls /proc/{os.getpid()}/root/ 2>&1; "
                      "ps -eo pid,args", timeout=20)
            seen = s.run(f"test -e /proc/{host.pid} && echo SEEN; test -e /proc/{os.getpid()} && echo SEEN; echo end")
        time.sleep(0.2)
        assert host.poll() is None, "a host process was killed from inside the sandbox"
    finally:
        host.kill()
        host.wait()
    assert secret not in r.output and "sleep 300" not in r.output, r.output
    assert seen.output == "end\n", "host pids are visible inside"  # the sandbox's own pids are all small


def _host_disks() -> list[tuple[str, int, int]]:
    found = []
    for d in sorted(Path("/sys/block").iterdir()):
        if d.name.startswith(("loop", "ram")):
            continue
        major, minor = (d / "dev").read_text().split(":")
        found.append((d.name, int(major), int(minor)))
    return found


def test_host_disks_and_kernel_devices_cannot_be_opened(confined):
    disks = _host_disks()
    assert disks, "the host has no block device to aim at"
    name, major, minor = disks[0]
    read = ("python3 -c \"import os, sys\ntry:\n    os.mknod('/tmp/disk', 0o600 | 0o060000, os.makedev(%d, %d))\n"
            "except OSError as e:\n    print('MKNOD', e.errno)\ntry:\n    print('READ', len(open('/tmp/disk', 'rb').read(512)))\n"
            "except OSError as e:\n    print('NOREAD', e.errno)\"" % (major, minor))
    with confined.start(_task()) as s:
        r = s.run(read, timeout=20)
        devices = [f"/dev/{name}", "/dev/sda", "/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg"]
        listing = s.run(f"for d in {' '.join(devices)}; do test -e $d && echo PRESENT $d; done; "
                        "python3 -c \"import os; os.open('/proc/sysrq-trigger', os.O_WRONLY)\" 2>/dev/null; echo rc=$?")
    assert "READ" not in r.output.split() and "NOREAD" in r.output, r.output
    assert listing.output.splitlines() == ["rc=1"], listing.output  # no device, and sysrq cannot be opened to write


def _engine_sockets() -> list[str]:
    from mirl.sandbox.podman import socket_path

    paths = [str(socket_path()), "/run/podman/podman.sock", "/var/run/docker.sock", "/run/docker.sock"]
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        paths.append(host[len("unix://"):])
    return [p for p in dict.fromkeys(paths) if os.path.exists(p)]


CONNECT_UNIX = """python3 -c "
import socket, sys
for path in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path.replace('@', '\\0', 1) if path.startswith('@') else path)
        print('CONNECTED', path)
    except OSError as e:
        print('BLOCKED', path, e.errno)
" """


def test_engine_socket_and_host_unix_sockets_are_unreachable(confined):
    engine = _engine_sockets()
    assert engine, "no engine socket on this host to aim at"
    for path in engine:  # the control: the engine answers on it, outside
        with socket.socket(socket.AF_UNIX) as c:
            c.connect(path)
    abstract = socket.socket(socket.AF_UNIX)
    name = f"mirl-probe-{uuid.uuid4().hex}"
    abstract.bind("\0" + name)
    abstract.listen()
    abstract.settimeout(0.5)
    try:
        with confined.start(_task()) as s:
            r = s.run(CONNECT_UNIX + " ".join(engine + ["@" + name]), timeout=30)
            found = s.run("find / -xdev -type s 2>/dev/null; echo end", timeout=60).output
        with pytest.raises(TimeoutError):
            abstract.accept()  # nobody reached the host's abstract socket
    finally:
        abstract.close()
    assert [line.split()[:2] for line in r.output.splitlines()] == [["BLOCKED", p] for p in engine + ["@" + name]], r.output
    assert found.strip().endswith("end") and not set(engine) & set(found.split()), found


def test_the_kits_files_and_shared_layers_are_not_writable(confined):
    """The sandbox cannot touch the installed kit, its cache (the engine socket, the base root
    filesystem that every bwrap session shares as a lower layer) or the next session's files.

    The attempts on host paths are harmless should they succeed (an open for append that writes
    nothing, a planted canary): a failing run of this test must not damage the kit or its cache."""
    import mirl
    from mirl.sandbox.base import user_cache_dir

    kit, cache = Path(mirl.__file__), Path(user_cache_dir())
    kit_sha = _sha(kit)
    canary = cache / f".mirl-probe-{uuid.uuid4().hex}"
    canary.write_text("host\n")
    rootfs = cache / "base" / "rootfs"
    shared = {p: _sha(p) for p in (rootfs / "etc" / "passwd", rootfs / "etc" / "hostname") if p.is_file()}
    probe = ("python3 -c \"import sys\nfor p in sys.argv[1:]:\n    try:\n        open(p, 'ab').close()\n"
             "        print('OPENED', p)\n    except OSError as e:\n        print('REFUSED', p)\" ")
    try:
        with confined.start(_task()) as s:
            first = s.run("sha256sum /etc/passwd /usr/bin/env").output
            opened = s.run(probe + f"{kit} {canary} {cache}/podman.sock-probe", timeout=30)
            r = s.run(f"rm -f {canary}; echo pwned >> /etc/passwd; echo pwned > /etc/hostname; rm -f /usr/bin/env; "
                      "echo done", timeout=30)
            assert r.output.strip().endswith("done") and "pwned" in s.run("cat /etc/passwd").output
        assert canary.read_text() == "host\n" and not (cache / "podman.sock-probe").exists()
    finally:
        canary.unlink(missing_ok=True)
        (cache / "podman.sock-probe").unlink(missing_ok=True)
    assert [line.split()[0] for line in opened.output.splitlines()] == ["REFUSED"] * 3, opened.output
    assert _sha(kit) == kit_sha and {p: _sha(p) for p in shared} == shared
    with confined.start(_task()) as s:  # the next session starts from the untouched image
        assert s.run("sha256sum /etc/passwd /usr/bin/env").output == first


API_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "MIRL_API_KEY")


def test_api_keys_in_the_environment_stay_out(any_backend, monkeypatch):
    secret = f"sk-{uuid.uuid4().hex}"
    for name in API_KEYS:
        monkeypatch.setenv(name, secret)
    with any_backend.start(_task()) as s:
        r = s.run("env; cat /proc/self/environ /proc/1/environ 2>/dev/null; tr '\\0' '\\n' < /proc/$PPID/environ")
        tmp = getattr(s, "tmp", None)
        written = {p: p.read_bytes() for p in Path(tmp).rglob("*") if p.is_file() and not p.is_symlink()
                   and "/root/" not in str(p) and "/upper/" not in str(p)} if tmp else {}
        attrs = s.container.attrs if hasattr(s, "container") else {}
    assert "PATH=" in r.output and secret not in r.output
    assert not any(name + "=" in r.output for name in API_KEYS), r.output
    for p, data in written.items():  # the session's own files (bwrap's log, local's home) hold no secret
        assert secret.encode() not in data, p
    assert secret not in str(attrs)  # nor does the container's configuration


def test_host_key_files_are_not_readable(confined, tmp_path):
    secret = f"sk-{uuid.uuid4().hex}"
    planted = [Path.home() / ".config" / f"mirl-probe-{uuid.uuid4().hex[:8]}" / "credentials",
               tmp_path / "api_key", Path("/etc") / f"mirl-probe-{uuid.uuid4().hex[:8]}.key"]
    for p in planted:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(secret + "\n")
    try:
        with confined.start(_task()) as s:
            r = s.run(" ".join(["cat"] + [str(p) for p in planted]) + "; grep -rs " + secret
                      + " /root /home /etc /tmp /var/tmp /run /srv /opt /app /logs; echo end", timeout=60)
    finally:
        for p in planted:
            p.unlink()
        planted[0].parent.rmdir()
    assert r.output.strip().endswith("end") and secret not in r.output, r.output


# --- network ------------------------------------------------------------------------------

PROBE_NET = """python3 -c "
import socket, sys
port, udp = int(sys.argv[1]), int(sys.argv[2])
for host in ('127.0.0.1', '::1', '10.0.2.2', '169.254.1.2', 'host.containers.internal', '1.1.1.1'):
    try:
        socket.create_connection((host, port), timeout=3).close()
        print('CONNECTED', host)
    except OSError as e:
        print('BLOCKED', host)
for host in ('127.0.0.1', '::1'):
    try:
        s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b'leak', (host, udp))
    except OSError:
        pass
" """


def test_host_loopback_services_are_unreachable(confined):
    """Servers the host runs on its loopback only (TCP on 127.0.0.1 and ::1, UDP) hear nothing."""
    tcp = socket.create_server(("127.0.0.1", 0))
    port = tcp.getsockname()[1]
    tcp6 = socket.create_server(("::1", port), family=socket.AF_INET6) if socket.has_ipv6 else None
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.5)
    socket.create_connection(("127.0.0.1", port), timeout=3).close()  # the control: it answers, outside
    tcp.accept()[0].close()
    try:
        with confined.start(_task()) as s:
            r = s.run(PROBE_NET + f"{port} {udp.getsockname()[1]}", timeout=60)
        for server in filter(None, (tcp, tcp6)):
            server.settimeout(0.2)
            with pytest.raises(TimeoutError):
                server.accept()
        with pytest.raises(TimeoutError):
            udp.recv(16)
    finally:
        for server in filter(None, (tcp, tcp6, udp)):
            server.close()
    lines = r.output.splitlines()
    assert len(lines) == 6 and all(line.startswith("BLOCKED ") for line in lines), r.output


# --- limits -------------------------------------------------------------------------------


def _host_has(controller: str) -> bool:
    """Whether this host gives the cgroup controller (v1 hierarchy, or the v2 controllers list)."""
    if (Path("/sys/fs/cgroup") / controller / "cgroup.procs").exists():
        return True
    try:
        return controller in Path("/sys/fs/cgroup/cgroup.controllers").read_text().split()
    except OSError:
        return False


def _host_lacks(message: str) -> None:
    """A skip that names the missing limit; a failure under an explicit `MIRL_REQUIRE_REAL=1`, which
    asks for every limit proven. No set-up can add a kernel's controller, so CI alone does not fail."""
    flag = os.environ.get("MIRL_REQUIRE_REAL", "")
    if flag and flag not in ("0", "false", "no"):
        pytest.fail(f"this host lacks a limit under MIRL_REQUIRE_REAL: {message}", pytrace=False)
    pytest.skip(f"this host lacks a limit: {message}")


def _session_cgroup(session, controller: str) -> Path:
    """The host's cgroup directory of `controller` that holds the session's processes."""
    if hasattr(session, "box"):
        group = session.box.cgroup if controller == "pids" else session.box.memory
        return group.path
    pid = session.container.attrs["State"]["Pid"] or session.container.client.api.inspect_container(
        session.container.id)["State"]["Pid"]
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return Path("/sys/fs/cgroup") / controller / path.lstrip("/")
    raise AssertionError(f"pid {pid} is in no {controller} cgroup")


@pytest.mark.parametrize("flag, outcome", [("", pytest.skip.Exception), ("0", pytest.skip.Exception),
                                           ("1", pytest.fail.Exception)])
def test_a_limit_the_host_lacks_is_a_skip_or_under_require_real_a_failure(monkeypatch, flag, outcome):
    """Neither limit test may pass on a host that cannot give its limit: it proves nothing there."""
    monkeypatch.setattr(f"{__name__}._host_has", lambda controller: False)
    monkeypatch.setenv("MIRL_REQUIRE_REAL", flag)
    for test in (test_pids_limit_holds_where_the_host_gives_one, test_memory_hog_is_killed_inside_its_limit):
        with pytest.raises(outcome, match="this host lacks a limit"):
            test(None)


# 1100 children that sleep: those past the cap are refused (EAGAIN), each counted once
FORKS = """python3 -c "
import os, time
refused = 0
for i in range(1100):
    try:
        pid = os.fork()
    except OSError:
        refused += 1
        continue
    if pid == 0:
        time.sleep(30)
        os._exit(0)
print('REFUSED', refused)
" """


def test_pids_limit_holds_where_the_host_gives_one(confined):
    """The session's processes sit in a host pids cgroup capped at 1024; on a host without the
    controller it is skipped, saying so (the fork-bomb test then proves the timeout alone still ends a bomb)."""
    from mirl.sandbox.docker_backend import PIDS_LIMIT

    if not _host_has("pids"):
        _host_lacks("no pids cgroup controller: fork bombs are bounded by the command timeout only")
    with confined.start(_task()) as s:
        s.run("true")
        group = _session_cgroup(s, "pids")
        limit = (group / "pids.max").read_text().strip()
        inside = {int(p) for p in (group / "cgroup.procs").read_text().split()}
        token = f"MIRL_PROBE={uuid.uuid4().hex}"
        s.run(f"env {token} sleep 30 &", timeout=10)
        sleeper = host_pids_with(token)
        held = {int(p) for p in (group / "cgroup.procs").read_text().split()}
        r = s.run(FORKS, timeout=120)
    assert limit == str(PIDS_LIMIT) and inside, (group, limit)
    assert len(sleeper) == 1 and set(sleeper) <= held  # what a command starts is inside the group
    refused = int(re.search(r"REFUSED (\d+)", r.output).group(1))
    assert 1100 - PIDS_LIMIT <= refused < 1100 - PIDS_LIMIT + 30, r.output  # the forks past the cap, no more


def test_a_host_without_the_pids_controller_is_named(bwrap_sandbox, monkeypatch, tmp_path, caplog):
    from mirl.sandbox import bwrap_backend
    from mirl.sandbox.process import PidsCgroup

    monkeypatch.setattr(PidsCgroup, "ROOT", tmp_path / "no-pids")
    monkeypatch.setattr(bwrap_backend, "_warned", set())
    caplog.set_level(logging.WARNING, logger="mirl.sandbox.bwrap_backend")
    with bwrap_sandbox.start(_task()) as s:
        assert s.box.cgroup is None and s.run("echo ok").output == "ok\n"
    assert "no cgroup-v1 pids controller" in caplog.text and "command timeout only" in caplog.text


def test_memory_hog_is_killed_inside_its_limit(confined):
    """A command that allocates three times the task's memory_mb (1024) is killed by the kernel;
    the session goes on, the host's cgroup for it says 1024 MiB."""
    if not _host_has("memory"):
        _host_lacks("no memory cgroup controller: memory_mb is not enforced")
    with confined.start(_task()) as s:
        r = s.run("python3 -c 'b = bytearray(3 << 30); print(\"ALLOCATED\", len(b))'", timeout=120)
        limit = int((_session_cgroup(s, "memory") / "memory.limit_in_bytes").read_text())
        after = s.run("echo alive")
    assert r.exit_code == 137 and "ALLOCATED" not in r.output, r.output
    assert limit == 1024 << 20
    assert after.output == "alive\n"


def _upper_dir(session) -> Path:
    if hasattr(session, "box"):
        return session.box.upper
    return Path(session.container.attrs["GraphDriver"]["Data"]["UpperDir"])


def _loops_backed_by(path: Path) -> list[str]:
    return [b.parts[-3] for b in Path("/sys/block").glob("loop*/loop/backing_file")
            if b.read_text().strip().startswith(str(path))]


FILL = "fallocate -l 256M /tmp/fill || head -c 256M /dev/zero > /tmp/fill; echo exit=$?; stat -c %s /tmp/fill"


def test_disk_fill_stops_at_storage_mb_in_bwrap_and_leaves_nothing(bwrap_sandbox, task_factory):
    """A bwrap session's writable layer is an ext4 disk of the task's storage_mb: a 256 MB fill of a
    64 MB task fails with ENOSPC inside, the session goes on, the host holds at most 64 MB of it, and
    at close the disk's loop device and files are gone."""
    task = task_factory("fill", toml="[environment]\nstorage_mb = 64\n[verifier]\ntimeout_sec = 60\n")
    with bwrap_sandbox.start(task) as s:
        r = s.run(FILL, timeout=120)
        on_host = _upper_dir(s) / "tmp" / "fill"
        written = on_host.stat().st_size
        after = s.run("rm /tmp/fill; echo alive > /tmp/ok; cat /tmp/ok")
        tmp = s.tmp
        assert _loops_backed_by(tmp), "no loop device holds the session's disk"
    assert "No space left on device" in r.output and "exit=0" not in r.output, r.output
    assert int(r.output.split()[-1]) <= 64 << 20 and written <= 64 << 20
    assert after.output == "alive\n"
    assert not tmp.exists()
    deadline = time.monotonic() + 10  # the device detaches when the sandbox's mount namespace is gone
    while _loops_backed_by(tmp) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _loops_backed_by(tmp) == []


def test_a_disk_left_attached_by_a_killed_run_is_detached_by_the_next(bwrap_sandbox, monkeypatch):
    """A run killed between attaching a session's disk and setting its autoclear (possible on kernels
    without LOOP_CONFIGURE) leaves the device attached: the next run's sweep detaches it with the dir."""
    import fcntl
    import sys
    import tempfile

    from mirl.sandbox import bwrap_backend, loop_disk
    from mirl.sandbox.owner import owner_id

    ended = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    dead_owner = owner_id(ended.pid)
    ended.kill()
    ended.wait()
    stale = Path(tempfile.mkdtemp(prefix=bwrap_backend.TMP_PREFIX))
    (stale / bwrap_backend.OWNER_FILE).write_text(dead_owner)
    image = stale / "disk.img"
    with open(image, "wb") as f:
        f.truncate(8 << 20)
    device, fd = loop_disk._free_device()
    backing = os.open(image, os.O_RDWR)
    fcntl.ioctl(fd, loop_disk.LOOP_SET_FD, backing)  # attached, no autoclear: as the kill left it
    os.close(backing)
    os.close(fd)
    try:
        assert _loops_backed_by(stale)
        monkeypatch.setattr(bwrap_backend, "_swept", False)
        bwrap_backend.sweep_stale()
        assert _loops_backed_by(stale) == [] and not stale.exists()
    finally:
        loop_disk.detach(device)
        subprocess.run(["rm", "-rf", str(stale)], check=True)


def test_bounded_disk_keeps_snapshots(bwrap_sandbox, task_factory):
    """Snapshots read the upper layer on the session's disk and restore onto the next one's."""
    task = task_factory("fill-snap", toml="[environment]\nstorage_mb = 64\n")
    with bwrap_sandbox.start(task) as s:
        s.run("echo kept > /app/kept.txt && rm -f /etc/motd")
        snap = s.snapshot()
    try:
        with bwrap_sandbox.start(task, snapshot=snap) as s:
            r = s.run("cat /app/kept.txt; test -e /etc/motd && echo motd || echo gone; df -m / | tail -1")
        assert r.output.splitlines()[:2] == ["kept", "gone"], r.output
    finally:
        bwrap_sandbox.drop_snapshot(snap)


def test_disk_fill_in_a_container_stops_near_storage_mb_and_is_returned_at_close(docker_sandbox, task_factory):
    """Containers on a host without overlay quotas: no file may pass the task's storage_mb (64 MB here:
    a 256 MB fallocate fails with EFBIG), and a command whose writes take the container's files past it
    is stopped within a poll interval; the session goes on, and its files are gone at close."""
    from mirl.sandbox.disk_watch import allocated_bytes

    task = task_factory("fill", toml="[environment]\nstorage_mb = 64\n[verifier]\ntimeout_sec = 60\n")
    with docker_sandbox.start(task) as s:
        big = s.run("fallocate -l 256M /tmp/big; echo exit=$?; ls -la /tmp", timeout=60)
        t0 = time.monotonic()
        many = s.run("i=0; while :; do head -c 8M /dev/zero > /tmp/f$i || break; i=$((i+1)); done; echo never",
                     timeout=120)
        took = time.monotonic() - t0
        upper = _upper_dir(s)
        held = allocated_bytes(upper)
        after = s.run("rm -f /tmp/f* /tmp/big; echo alive")
    assert "File too large" in big.output and "exit=0" not in big.output, big.output
    assert "passed the task's storage_mb (64 MB)" in many.output and "never" not in many.output, many.output
    assert took < 30 and 64 << 20 < held < 1 << 30, (took, held)
    assert after.output == "alive\n"
    assert not upper.exists()


# --- processes ----------------------------------------------------------------------------


IGNORE_TERM = "trap '' TERM INT HUP; while :; do sleep 0.2; done"


def test_processes_ignoring_sigterm_end_at_timeout_and_at_close(any_backend):
    token = f"MIRL_STUBBORN={uuid.uuid4().hex}"
    s = any_backend.start(_task())
    try:
        r = s.run(f"env {token} bash -c \"{IGNORE_TERM}\"", timeout=2)
        assert (r.timed_out, r.exit_code) == (True, 124)
        assert wait_until_gone(token) == []
        s.run(f"env {token} setsid bash -c \"{IGNORE_TERM}\" >/dev/null 2>&1 < /dev/null & sleep 0.5")
        assert host_pids_with(token), "the background process did not start"
    finally:
        s.close()
    assert wait_until_gone(token) == []


def _by_name(name: str) -> list[str]:
    """States ("S", "Z", ...) of host processes whose command name is `name`."""
    states = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                stat = Path(f"/proc/{pid}/stat").read_bytes()
            except OSError:
                continue
            if stat[stat.index(b"(") + 1 : stat.rindex(b")")] == name.encode():
                states.append(stat[stat.rindex(b")") + 2 :].split()[0].decode())
    return sorted(states)


def test_zombies_are_gone_after_close(any_backend):
    """A parent that never reaps leaves zombies in the session; none outlives close."""
    name = f"mz{uuid.uuid4().hex[:10]}"  # a copy of sleep under a name no other process has
    with any_backend.start(_task()) as s:
        r = s.run(f"cp \"$(command -v sleep)\" \"$HOME/{name}\" && cd \"$HOME\" && "
                  f"(sh -c './{name} 0 & ./{name} 0 & ./{name} 0 & exec ./{name} 600' &) && sleep 1 && "
                  f"ls -l \"$HOME/{name}\" && echo started")
        assert r.exit_code == 0 and r.output.strip().endswith("started"), (r.exit_code, r.output)
        deadline = time.monotonic() + 20
        while _by_name(name) != ["S", "Z", "Z", "Z"] and time.monotonic() < deadline:
            time.sleep(0.1)
        seen = s.run(f"ps -eo pid,ppid,stat,comm | grep -e '{name}' -e PID; echo HOME=$HOME").output
        assert _by_name(name) == ["S", "Z", "Z", "Z"], f"the host's /proc; the session's ps:\n{seen}\n{r.output}"
    deadline = time.monotonic() + 10
    while _by_name(name) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _by_name(name) == []


def test_census_sees_what_a_session_holds(bwrap_sandbox):
    """The leak check can fail: an open session is found in every kind it holds."""
    before = census()
    s = bwrap_sandbox.start(_task())
    try:
        s.run("sleep 60 &")
        found = settled_leaks(before, within_s=0)
    finally:
        s.close()
    assert {"temp_dirs", "cgroups", "processes"} <= set(found), found
    assert str(s.tmp) in found["temp_dirs"] and any("bwrap" in p for p in found["processes"])
    assert settled_leaks(before) == {}


def test_the_engine_service_runs_in_its_cache_not_where_it_was_started(monkeypatch, tmp_path):
    """The podman service outlives the process that started it: it must not keep (and write into,
    as conmon does with an `oom` marker) the starter's working directory, e.g. a checkout."""
    import shutil

    from mirl.sandbox import podman

    if shutil.which("podman") is None:
        from tests.real import missing

        missing("podman", "`apt-get install podman runc`")
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("MIRL_CACHE", str(cache))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(podman, "_engine_url_candidates", lambda: [f"unix://{podman.socket_path()}"])
    monkeypatch.chdir(work)
    url = podman.ensure_service(set_env=False)
    pid = int(podman.pid_path().read_text())
    try:
        assert url == f"unix://{podman.socket_path()}" and podman.socket_path().parent == cache
        assert os.readlink(f"/proc/{pid}/cwd") == str(cache)
    finally:
        assert podman.stop_service()
        try:
            os.waitpid(pid, 0)  # started by this process: reap it here
        except ChildProcessError:
            pass
