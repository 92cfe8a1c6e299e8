"""The local backend: temp copies of task files, absolute paths through a private mount namespace."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_helpers import data_task

from mirl.sandbox import local_backend
from mirl.sandbox.base import SandboxConfig
from mirl.sandbox.files import upload
from mirl.sandbox.select import make_sandbox
from tests.real import missing

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def sandbox():
    return make_sandbox(SandboxConfig(backend="local"))


def test_warns_that_it_is_unconfined_and_skips_installs(sandbox, caplog, monkeypatch):
    from mirl.sandbox import local_backend

    monkeypatch.setattr(local_backend, "_WARNED", set())
    caplog.set_level(logging.WARNING, logger="mirl.sandbox.local_backend")
    with sandbox.start(data_task("contract-basic")):
        pass
    assert "UNCONFINED" in caplog.text
    assert "skipping Dockerfile line 11" in caplog.text
    caplog.clear()
    with sandbox.start(data_task("contract-basic")):  # once per task: a stage starts hundreds of sessions
        pass
    assert "UNCONFINED" not in caplog.text


def test_auto_never_picks_local(monkeypatch):
    from mirl.sandbox import bwrap_backend, docker_backend
    from mirl.sandbox.base import SandboxError

    monkeypatch.setattr(docker_backend, "engine_available", lambda: False)
    monkeypatch.setattr(bwrap_backend, "available", lambda: False)
    with pytest.raises(SandboxError, match="no sandbox available"):
        make_sandbox(SandboxConfig(backend="auto"))


def test_absolute_paths_resolve_without_touching_the_host(sandbox):
    if not local_backend.unshare_works():
        missing("root and a working `unshare --mount --propagation private`", "run as root where mounts are allowed")
    before = set(os.listdir("/app")) if os.path.isdir("/app") else set()
    with sandbox.start(data_task("contract-basic")) as s:
        r = s.run("echo new > /app/created.txt && cat /app/data.txt /app/built.txt && ls /tests | wc -l")
        assert r.exit_code == 0 and r.output.split()[-2:] == ["built", "0"], r.output
        assert set(os.listdir("/app")) == before  # the host's /app only served as a mount point
    assert set(os.listdir("/app")) == before


def test_without_a_mount_namespace_commands_run_in_the_temp_copy(sandbox, monkeypatch, caplog, task_factory):
    monkeypatch.setattr(local_backend, "unshare_works", lambda: False)
    caplog.set_level(logging.WARNING, logger="mirl.sandbox.local_backend")
    task = task_factory(dockerfile="FROM x\nWORKDIR /app\nCOPY data.txt ./\n", files={"data.txt": "line one\n"})
    with sandbox.start(task) as s:
        r = s.run("pwd; cat data.txt")
        assert r.output.splitlines()[0] == str(s.root / "app")
        assert "line one" in r.output
    assert "absolute paths" in caplog.text


def test_sessions_starting_together_all_wait_for_the_one_unshare_check(monkeypatch):
    """The check takes a while; threads asking meanwhile must get its answer, not a placeholder."""
    import subprocess
    import threading
    import time

    calls = []

    def slow_unshare(args, **kwargs):
        calls.append(args)
        time.sleep(0.3)
        return subprocess.CompletedProcess(args, 0, b"", b"")

    monkeypatch.setattr(local_backend, "_unshare_ok", None)
    monkeypatch.setattr(local_backend.os, "geteuid", lambda: 0)
    monkeypatch.setattr(local_backend.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(local_backend.subprocess, "run", slow_unshare)
    start, answers = threading.Barrier(8), []

    def ask():
        start.wait()
        answers.append(local_backend.unshare_works())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [True] * 8
    assert len(calls) == 1


def namespaced():
    if not local_backend.unshare_works():
        missing("root and a working `unshare --mount --propagation private`", "run as root where mounts are allowed")


def test_sessions_side_by_side_have_their_own_etc_and_tmp(sandbox, task_factory):
    """Two sessions of a task that adds a group and moves a file out of /tmp both start (on one /etc
    the second groupadd failed; a COPY target bound on its own could not be removed), and the host's
    /etc/group and /tmp keep none of it."""
    namespaced()
    task = task_factory(dockerfile="FROM x\nWORKDIR /app\nCOPY setup.sh /tmp/setup.sh\n"
                                   "RUN groupadd -g 3051 mirltestgroup && bash /tmp/setup.sh && rm /tmp/setup.sh\n",
                        files={"setup.sh": "echo made > /app/made.txt\n"})
    host_group = open("/etc/group").read()
    with sandbox.start(task) as a, sandbox.start(task) as b:
        for s in (a, b):
            r = s.run("getent group mirltestgroup; cat /app/made.txt; ls /tmp")
            assert r.exit_code == 0 and "mirltestgroup:x:3051" in r.output and "made" in r.output, r.output
            assert "setup.sh" not in r.output
        a.run("echo mine > /tmp/only-a")
        assert b.run("test -e /tmp/only-a").exit_code == 1
    assert open("/etc/group").read() == host_group and not os.path.exists("/tmp/only-a")


def _host_etc_dir_with_a_file() -> tuple[str, str]:
    """A directory of the host's /etc holding a regular file: (directory, file), as absolute paths."""
    for d in sorted(Path("/etc").iterdir()):
        if d.is_dir() and not d.is_symlink():
            for f in sorted(d.iterdir()):
                if f.is_file() and not f.is_symlink() and os.access(f, os.R_OK):
                    return str(d), str(f)
    raise AssertionError("the host's /etc has no directory with a readable file")


@pytest.mark.parametrize("overlay", [True, False], ids=["overlay", "copy"])
def test_the_session_etc_is_the_hosts_plus_the_tasks_and_its_own_writes(sandbox, task_factory, monkeypatch, overlay):
    """/etc is an overlay over the host's (one mount, nothing copied at start) or, without overlayfs, a
    copy: either way the task's files are on top, and the session's writes and deletions (of files and
    of whole directories) stay its own; `read_file` sees what the session's commands see."""
    namespaced()
    if overlay and not local_backend.overlay_works():
        missing("an overlayfs mount over /etc in a private mount namespace", "run as root on a kernel with overlayfs")
    monkeypatch.setattr(local_backend, "_overlay_ok", {d: overlay for d in ("/etc", *local_backend.SHIELDED)})
    task = task_factory(dockerfile="FROM x\nWORKDIR /app\nCOPY mirl.conf /etc/mirl-test/mirl.conf\n",
                        files={"mirl.conf": "task=1\n"})
    gone_dir, gone_file = _host_etc_dir_with_a_file()
    host_file = Path(gone_file).read_bytes()
    host_passwd = Path("/etc/passwd").read_text()
    with sandbox.start(task) as s:
        assert ("/etc" in s.overlays) == overlay
        assert (s.root / "etc" / "passwd").exists() != overlay  # the overlay copied none of the host's /etc
        r = s.run(f"cat /etc/mirl-test/mirl.conf && grep -c '^root:' /etc/passwd && echo x >> /etc/passwd "
                  f"&& rm -r {gone_dir} && echo made > /etc/mirl-test/new.txt")
        assert r.exit_code == 0 and r.output.startswith("task=1\n1\n"), r.output
        assert s.read_file("/etc/mirl-test/new.txt") == "made\n"
        assert s.read_file("/etc/passwd") == host_passwd + "x\n"  # the session's, written
        assert s.read_file("/etc/group") == Path("/etc/group").read_text()  # the host's, unchanged
        assert s.read_file(gone_file) is None  # its directory was removed in the session
        assert s.run(f"test -e {gone_file}").exit_code == 1
    assert not Path("/etc/mirl-test").exists() and Path("/etc/passwd").read_text() == host_passwd
    assert Path(gone_file).read_bytes() == host_file


def test_what_is_mounted_inside_the_hosts_etc_shows_in_the_session(tmp_path, task_factory):
    """A container's /etc/hosts (and resolv.conf, hostname) is a file mounted on the host's /etc: the
    overlay's lower layer would show the file underneath, so the session gets the mounted one."""
    namespaced()
    if not local_backend.overlay_works():
        missing("an overlayfs mount over /etc in a private mount namespace", "run as root on a kernel with overlayfs")
    mounted = tmp_path / "hosts"
    mounted.write_text("10.9.8.7 mirl-mounted-host\n")
    task = task_factory(dockerfile="FROM x\nWORKDIR /app\n").path
    code = ("import logging, sys; logging.disable(logging.WARNING)\n"
            "from mirl.sandbox import SandboxConfig, make_sandbox\nfrom mirl.tasks import load_task\n"
            f"s = make_sandbox(SandboxConfig(backend='local')).start(load_task({str(task)!r}))\n"
            "r = s.run('cat /etc/hosts'); s.close(); sys.stdout.write(r.output)\n")
    # the mount is made in a mount namespace of the child's own: the host's /etc is not touched
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        f"mount --bind {mounted} /etc/hosts && exec {sys.executable} -c \"$0\"", code],
                       capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout == "10.9.8.7 mirl-mounted-host\n"


def test_a_runner_started_after_one_died_joins_the_sessions_mounts(sandbox, task_factory):
    """A runner may die (killed from outside its PID namespace: from inside it is PID 1, which no command
    can signal); the next one joins the session's mount namespace (its files as they were), rather than
    mounting a second overlay on the same upper layer."""
    namespaced()
    with sandbox.start(task_factory(dockerfile="FROM x\nWORKDIR /app\n")) as s:
        first = s.runner.proc.pid
        ns = os.stat(f"/proc/{first}/ns/mnt").st_ino
        assert s.run("echo kept > /etc/mirl-kept && echo kept > /app/kept").exit_code == 0
        os.kill(first, 9)
        s.runner.proc.wait(timeout=10)
        r = s.run("cat /etc/mirl-kept /app/kept")
        assert s.runner.proc.pid != first and os.stat(f"/proc/{s.runner.proc.pid}/ns/mnt").st_ino == ns
        assert r.exit_code == 0 and r.output == "kept\nkept\n", r.output
    assert not Path("/etc/mirl-kept").exists()


def test_home_is_there_under_the_private_tmp(sandbox, task_factory):
    """The session's HOME lives in its temp root under the host's /tmp, which the private /tmp covers:
    it is kept inside that /tmp at its path, so `cd ~` works and what is written there is the session's own."""
    namespaced()
    with sandbox.start(task_factory(dockerfile="FROM x\nWORKDIR /app\n")) as s:
        r = s.run('cd "$HOME" && echo kept > note && pwd && cat "$HOME/note"')
        assert r.exit_code == 0 and r.output.split() == [s.env["HOME"], "kept"], r.output
        assert (s.home / "note").read_text() == "kept\n"


def test_a_copy_into_a_host_directory_merges_with_it(sandbox, task_factory):
    """`COPY opt /opt` on a host whose /opt holds the interpreter: the task's entries appear beside
    the host's instead of hiding them (the runner could not start when its Python was hidden)."""
    import shutil
    import uuid

    namespaced()
    host_dir = Path("/var/tmp") / f"mirl-merge-{uuid.uuid4().hex[:8]}"  # not under /tmp, which is the session's
    try:
        (host_dir / "keep").mkdir(parents=True)
        (host_dir / "keep" / "file").write_text("host\n")
        task = task_factory(dockerfile=f"FROM x\nWORKDIR /app\nCOPY stuff {host_dir}\n",
                            files={"stuff/service/run.sh": "echo task\n"})
        with sandbox.start(task) as s:
            r = s.run(f"cat {host_dir}/keep/file {host_dir}/service/run.sh")
            assert r.exit_code == 0 and r.output.split() == ["host", "echo", "task"], r.output
        assert sorted(os.listdir(host_dir)) == ["keep", "service"]  # an empty mount point is all it left
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)


def test_a_command_missing_after_a_skipped_install_names_the_install_line(sandbox, task_factory):
    from mirl.sandbox.base import SandboxError

    task = task_factory(dockerfile="FROM x\nWORKDIR /app\nRUN apt-get install -y mirl-no-such-tool\n"
                                   "RUN mirl-no-such-tool --version\n")
    with pytest.raises(SandboxError, match=r"line 4 failed \(exit 127\)(.|\n)*skipped the install line\(s\) 3"):
        sandbox.start(task)


def test_a_runner_whose_socket_hung_up_is_not_alive_before_it_can_be_reaped():
    """After `kill -9` of the runner its control socket closes while it exits, before `poll` can reap it:
    the next command must start a new runner rather than write to the dead socket (a broken pipe)."""
    import socket
    import types

    from mirl.sandbox.local_backend import Runner

    host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    runner = Runner.__new__(Runner)
    runner.sock, runner.proc = host, types.SimpleNamespace(poll=lambda: None)  # not reaped yet
    try:
        assert runner.alive()
        child.close()
        assert not runner.alive()
    finally:
        host.close()


_FORKS: list[int] = []
_WATCH: list[bool] = []
os.register_at_fork(before=lambda: _FORKS.append(1) if _WATCH else None)


def test_starting_a_session_never_forks_the_interpreter(sandbox, task_factory):
    """A Popen with a preexec_fn forks (never vforks) and holds the GIL until the child has run it: in a
    process that owns a GPU, tens of ms of copied page tables per session in which no other thread runs,
    the engine's owner thread included. The runner sets itself up (`mirl.sandbox.prelude`), so starting
    a session, and a runner after one died, forks no interpreter at all (at-fork hooks never run)."""
    namespaced()
    _FORKS.clear()
    _WATCH.append(True)
    try:
        with sandbox.start(task_factory(dockerfile="FROM x\nWORKDIR /app\n")) as s:
            assert s.run("echo x > /etc/mirl-fork-probe").exit_code == 0
            s.run(f"kill -9 {s.runner.proc.pid}")
            r = s.run("cat /etc/mirl-fork-probe")  # a new runner, in the session's namespace
            assert r.exit_code == 0 and r.output == "x\n", r.output
    finally:
        _WATCH.clear()
    assert _FORKS == []


def test_a_runner_that_cannot_set_itself_up_says_why(sandbox, task_factory, monkeypatch):
    namespaced()
    monkeypatch.setattr(local_backend, "_runner_steps", lambda *a: [("mount", b"/nonexistent-src", b"/nonexistent-dest",
                                                                     None, 0x1000, None, "bind mount of the probe")])
    from mirl.sandbox.base import SandboxError

    with pytest.raises(SandboxError, match=r"the command runner did not start: mirl-prelude: bind mount of the probe"):
        with sandbox.start(task_factory(dockerfile="FROM x\nWORKDIR /app\n")):
            pass


def test_the_hosts_programs_are_read_only_in_a_session(sandbox, task_factory, tmp_path):

    """A policy at temperature 1.0 runs what it samples as root: once `chmod` on the host's /bin took a GPU
    machine's bash away mid-run. In the session's mount namespace the host's /usr, /bin, /lib*, /opt ...
    are read-only; the session's own /app, /tmp, /etc, HOME and /logs stay writable, and so does a new
    top-level directory (the oracle's /solution)."""
    namespaced()
    probe = Path("/usr/mirl-ro-probe")
    try:
        with sandbox.start(task_factory(dockerfile="FROM x\nWORKDIR /usr/src/app\n")) as s:
            mode = oct(os.stat("/usr/bin/env").st_mode)[-3:]  # set again as it is: harmless if the test fails
            r = s.run(f"touch {probe}; echo $?; chmod {mode} /usr/bin/env; echo $?")
            code_touch, code_chmod = r.output.split()[-2:]
            assert code_touch != "0" and code_chmod != "0", r.output
            assert "Read-only file system" in r.output, r.output
            w = s.run('for d in /usr/src/app /tmp /etc "$HOME" /logs/verifier; do echo x > "$d/mirl-w" || exit 1; done; '
                      'echo ok')
            assert w.exit_code == 0 and w.output.strip() == "ok", w.output
            src = tmp_path / "solve.sh"
            src.write_text("echo solved\n")
            upload(s, {"solve.sh": src}, "/mirl-solution-probe")  # as the oracle uploads /solution
            assert s.run("bash /mirl-solution-probe/solve.sh").output == "solved\n"
    finally:
        probe.unlink(missing_ok=True)
        shutil.rmtree("/mirl-solution-probe", ignore_errors=True)
    assert not probe.exists()


@pytest.mark.parametrize("overlay", [True, False], ids=["overlay", "read-only"])
def test_the_hosts_homes_and_the_kits_directory_are_out_of_a_sessions_reach(sandbox, task_factory, monkeypatch,
                                                                            overlay):
    """A policy at temperature 1.0 samples `rm -rf` too: on a GPU machine a run's directory under /root was
    emptied mid-training. In a session the host's /root and /home are overlays (the host's files seen; the
    session's writes and deletions its own, so `useradd -m` still works) or, without overlayfs, read-only;
    the directory the kit runs in is read-only."""
    import uuid

    namespaced()
    if overlay and not all(local_backend.overlay_works(d) for d in local_backend.SHIELDED):
        missing("an overlayfs mount over /root and /home in a private mount namespace", "run as root with overlayfs")
    etc = local_backend.overlay_works("/etc")
    monkeypatch.setattr(local_backend, "_overlay_ok", {"/etc": etc, **{d: overlay for d in local_backend.SHIELDED}})
    tag = uuid.uuid4().hex[:8]
    code = Path(local_backend.__file__).resolve().parents[2]  # the kit's own code: read-only, or an overlay's
    kit = Path("/var/tmp") / f"mirl-kit-{tag}"  # neither under /tmp (the session's own) nor a shielded directory
    root_file, home_dir = Path("/root") / f".mirl-probe-{tag}", Path("/home") / f"mirl-probe-{tag}"
    try:
        kit.mkdir()
        (kit / "run.json").write_text("kept\n")
        root_file.write_text("host\n")
        monkeypatch.chdir(kit)
        with sandbox.start(task_factory(dockerfile="FROM x\nWORKDIR /app\n")) as s:
            r = s.run(f"cat {root_file}; rm -f {root_file}; test -e {root_file}; echo $?; mkdir {home_dir}; echo $?; "
                      f"rm -f {kit}/run.json; test -e {kit}/run.json; echo $?; touch {code}/.mirl-probe-{tag}")
            seen, *codes = r.output.split("\n")[0], *[line for line in r.output.split("\n") if line.isdigit()]
            assert seen == "host", r.output
            assert codes == (["1", "0", "0"] if overlay else ["0", "1", "0"]), r.output
            assert "Read-only file system" in r.output, r.output
        assert root_file.read_text() == "host\n" and not home_dir.exists()
        assert (kit / "run.json").read_text() == "kept\n" and not (code / f".mirl-probe-{tag}").exists()
    finally:
        (code / f".mirl-probe-{tag}").unlink(missing_ok=True)
        root_file.unlink(missing_ok=True)
        shutil.rmtree(home_dir, ignore_errors=True)
        shutil.rmtree(kit, ignore_errors=True)


def test_a_workdir_under_the_overlaid_root_hides_the_hosts_files_there(sandbox, task_factory):
    """WORKDIR /root/<dir> is bound over the /root overlay, as it was a bind before /root was one: what
    the host has in that directory is not the task's; /root keeps the host's mode in the session."""
    import uuid

    namespaced()
    if not local_backend.overlay_works("/root"):
        missing("an overlayfs mount over /root in a private mount namespace", "run as root with overlayfs")
    wd = Path("/root") / f"mirl-wd-{uuid.uuid4().hex[:8]}"
    try:
        wd.mkdir()
        (wd / "hostfile").write_text("host\n")
        with sandbox.start(task_factory(dockerfile=f"FROM x\nWORKDIR {wd}\nCOPY a.txt {wd}/a.txt\n",
                                        files={"a.txt": "task\n"})) as s:
            assert "/root" in s.overlays
            r = s.run("ls -A && stat -c %a /root")
            assert r.exit_code == 0 and r.output.split() == ["a.txt", oct(os.stat("/root").st_mode & 0o7777)[2:]], r.output
        assert sorted(os.listdir(wd)) == ["hostfile"]
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def test_a_chmod_over_the_hosts_root_copies_no_file_data_into_the_session(sandbox, task_factory):
    """A sampled `chmod -R` over /root must not copy the host's files into every session's temp root:
    the overlay copies metadata only (`metacopy=on`, where the kernel takes it)."""
    import uuid

    namespaced()
    if not (local_backend.overlay_works("/root") and local_backend._metacopy_ok.get("/root")):
        missing("an overlayfs mount with metacopy=on over /root", "run as root on a kernel with overlayfs metacopy")
    big = Path("/root") / f".mirl-big-{uuid.uuid4().hex[:8]}"
    try:
        big.write_bytes(os.urandom(8 << 20))
        big.chmod(0o644)
        with sandbox.start(task_factory(dockerfile="FROM x\nWORKDIR /app\n")) as s:
            r = s.run(f"chmod 600 {big} && stat -c %a {big} && head -c 4 {big} | wc -c")
            assert r.exit_code == 0 and r.output.split() == ["600", "4"], r.output
            up = s.root / "root" / big.name
            assert up.exists() and up.stat().st_blocks * 512 < (1 << 20), up.stat()
        assert oct(big.stat().st_mode & 0o777) == "0o644"
    finally:
        big.unlink(missing_ok=True)


@pytest.mark.parametrize("namespace", [True, False], ids=["namespace", "temp-root"])
def test_a_verifier_folder_made_a_link_to_the_host_is_never_emptied(sandbox, task_factory, monkeypatch, namespace):
    """A command that replaced /logs/verifier with a link to a host directory must not have that
    directory's files deleted when the tests are put (once done from the host, outside the session's
    mounts); the link is replaced by a folder of the session's own and the tests still run. Without a
    mount namespace, where the tests are put from the host into the temp root, too."""
    import uuid

    namespaced()
    if not namespace:  # commands run in the temp root's copy of /app, where /logs is ../logs
        monkeypatch.setattr(local_backend, "unshare_works", lambda: False)
    logs = "/logs/verifier" if namespace else "../logs/verifier"
    keep = Path("/var/tmp") / f"mirl-keep-{uuid.uuid4().hex[:8]}"
    try:
        keep.mkdir()
        (keep / "data").write_text("kept\n")
        with sandbox.start(task_factory(dockerfile="FROM x\nWORKDIR /app\n",
                                        test_sh="#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")) as s:
            assert s.run(f"rm -rf {logs} && ln -s {keep} {logs}").exit_code == 0
            result = s.verify()
        if namespace:  # (without one the script's absolute /logs is the host's: no reward is read)
            assert result.reward == 1.0, result
        assert sorted(os.listdir(keep)) == ["data"] and (keep / "data").read_text() == "kept\n"
    finally:
        shutil.rmtree(keep, ignore_errors=True)


def test_a_bind_over_this_pythons_home_runs_the_runner_on_the_systems(sandbox, task_factory):
    """A task whose WORKDIR is /root (termigen's cloudflare_dns_caa_record_setup_medium) hides a Python
    installed under /root (pyenv): the runner then runs on /usr/bin/python3 instead of failing to start."""
    namespaced()
    home = os.path.dirname(os.path.realpath(sys.executable))
    assert local_backend._runner_python([home]) == "/usr/bin/python3"
    assert local_backend._runner_python(["/srv/mirl-unrelated"]) == sys.executable
    with sandbox.start(task_factory(dockerfile="FROM x\nWORKDIR /root\n")) as s:
        r = s.run("pwd && ls -A")
        assert r.exit_code == 0 and r.output.split()[0] == "/root", r.output


@pytest.mark.parametrize("cgroup", [True, False])
def test_closing_a_session_with_nothing_left_running_scans_proc_once_or_not_at_all(sandbox, monkeypatch, cgroup):
    """With 64 sessions beside a GPU engine each scan of /proc is GIL time the engine's thread waits for. A
    session in a pids cgroup kills what is left through it (no scan); without one, the runner goes first
    (it carries the session's marker), so the sweep for leftovers finds nobody and reads /proc once."""
    from mirl.sandbox import process

    if not cgroup:
        monkeypatch.setattr(local_backend.PidsCgroup, "create", classmethod(lambda cls, name, limit: None))
        monkeypatch.setattr(local_backend.SessionCgroup, "create", classmethod(lambda cls, name, mount=None: None))
    session = sandbox.start(data_task("contract-basic"))
    held = session.cgroup is not None  # where the host offers one (root, cgroup v1's pids controller)
    assert held or not cgroup or os.geteuid() != 0 or not local_backend.PidsCgroup.ROOT.is_dir()
    assert session.run("echo hi").output == "hi\n"
    scans = []
    real = process.marked_pids

    def counted(tokens, sids=(), proc="/proc", since=None):
        scans.append(since)
        return real(tokens, sids, proc, since)

    monkeypatch.setattr(process, "marked_pids", counted)
    session.close()
    if held:
        assert scans == []
    else:
        assert len(scans) == 1 and scans[0] is not None  # processes older than the session passed over


def test_without_a_cgroup_close_kills_what_every_runner_left_behind(sandbox, monkeypatch):
    """The scan at close passes over processes older than the session's first runner, not its latest: a
    daemon started under a runner an agent's command killed must die too."""
    import uuid

    from sandbox_helpers import host_pids_with, wait_until_gone

    monkeypatch.setattr(local_backend.PidsCgroup, "create", classmethod(lambda cls, name, limit: None))
    monkeypatch.setattr(local_backend.SessionCgroup, "create", classmethod(lambda cls, name, mount=None: None))
    token = f"MIRL_DAEMON_{uuid.uuid4().hex}=1"
    session = sandbox.start(data_task("contract-basic"))
    session.run(f"export {token}; setsid nohup sh -c 'sleep 1000 & sleep 1000' >/dev/null 2>&1 < /dev/null & sleep 0.3")
    assert len(host_pids_with(token)) == 3
    session.runner.proc.kill()  # as `kill -9 $PPID` from a command would
    session.runner.proc.wait(5)
    assert session.run("echo again").output == "again\n"  # a new runner, started later
    assert len(session.starts) == 2 and session.starts[0] < session.starts[1]
    session.close()
    assert wait_until_gone(token) == []


def test_on_cgroup_v2_alone_a_session_is_killed_through_its_group_without_a_scan(sandbox, monkeypatch, tmp_path):
    """A host without cgroup v1's pids controller (the GPU machines here) but with cgroup v2: the session
    runs in a v2 group of its own, and close kills a daemon it left through the group, reading no /proc."""
    import uuid

    from sandbox_helpers import cgroup2_hierarchy, host_pids_with, wait_until_gone

    from mirl.sandbox import process

    token = f"MIRL_DAEMON_{uuid.uuid4().hex}=1"
    with cgroup2_hierarchy(tmp_path / "cg2") as root:
        create = local_backend.SessionCgroup.create.__func__
        monkeypatch.setattr(local_backend, "_V2", [])  # probed afresh, on this hierarchy
        monkeypatch.setattr(local_backend.PidsCgroup, "create", classmethod(lambda cls, name, limit: None))
        monkeypatch.setattr(local_backend.SessionCgroup, "create",
                            classmethod(lambda cls, name, mount=None: create(cls, name, mount=root)))
        session = sandbox.start(data_task("contract-basic"))
        assert isinstance(session.cgroup, local_backend.SessionCgroup)
        session.run(f"export {token}; setsid nohup sh -c 'sleep 1000 & sleep 1000' >/dev/null 2>&1 < /dev/null & sleep 0.3")
        assert len(host_pids_with(token)) == 3
        scans = []
        monkeypatch.setattr(process, "marked_pids", lambda *a, **k: scans.append(a) or [])
        path = session.cgroup.path
        session.close()
        assert scans == [] and not path.exists()
        assert wait_until_gone(token) == []


def test_where_a_runner_cannot_join_a_v2_group_sessions_run_without_one(sandbox, monkeypatch, tmp_path):
    """A v2 group this process can make but a runner cannot join (a delegation or cgroup namespace can forbid
    the move) would fail every session's start: the one probe finds it, and sessions close by the scan."""
    from sandbox_helpers import cgroup2_hierarchy

    with cgroup2_hierarchy(tmp_path / "cg2") as root:
        create = local_backend.SessionCgroup.create.__func__

        def unjoinable(cls, name, mount=None):
            group = create(cls, name, mount=root)
            if group is not None:  # its cgroup.procs refuses writes, as a group outside the delegation would
                group.path = group.path.parent / "no-such-group"
            return group

        monkeypatch.setattr(local_backend, "_V2", [])
        monkeypatch.setattr(local_backend.PidsCgroup, "create", classmethod(lambda cls, name, limit: None))
        monkeypatch.setattr(local_backend.SessionCgroup, "create", classmethod(unjoinable))
        with sandbox.start(data_task("contract-basic")) as session:
            assert session.cgroup is None and local_backend._V2 == [False]
            assert session.run("echo hi").output == "hi\n"


def test_a_command_that_signals_every_process_spares_the_host_and_the_session(sandbox):
    """A sampled `kill -9 -1` or `pkill -f python` once ended a GPU run's whole device call: a session's
    commands run in a PID namespace of their own, so they reach only the session's processes."""
    if not local_backend.pid_namespace_works():
        missing("root, `unshare` and a PID namespace with its own /proc", "run as root where mounts are allowed")
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with sandbox.start(data_task("contract-basic")) as s:
            assert s.run("sleep 30 & echo $!").exit_code == 0
            seen = s.run("ps -e -o pid= | wc -l").output
            assert int(seen) < 10, seen  # the session's few processes, not the host's
            s.run("pkill -9 -f python")  # its own shell's command line names python: that shell goes too
            r = s.run("kill -9 -1; echo still here")
            assert r.output == "still here\n", r.output
            assert host.poll() is None  # the host's python was reached by neither
            after = s.run("echo again; ps -e -o comm= | grep -c sleep")
            assert after.output.split()[:2] == ["again", "0"], after.output  # the session's own sleep was killed
    finally:
        host.kill()
        host.wait()
