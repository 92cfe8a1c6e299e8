"""The sandbox prelude: set-up steps in the new process itself, then exec (no preexec_fn fork)."""

from __future__ import annotations

import subprocess

from mirl.sandbox.prelude import prelude_argv


def test_steps_run_in_order_then_the_command(tmp_path):
    made = tmp_path / "a" / "b"
    r = subprocess.run(prelude_argv([("mkdirs", str(made).encode())], ["sh", "-c", f"test -d {made} && echo ran"]),
                       capture_output=True, text=True, timeout=30)
    assert (r.returncode, r.stdout, r.stderr) == (0, "ran\n", "")


def test_a_failed_step_names_itself_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    steps = [("mount", str(tmp_path / "missing").encode(), str(tmp_path / "nowhere").encode(), None, 0x1000, None,
              "bind mount of the missing directory")]
    r = subprocess.run(prelude_argv(steps, ["touch", str(marker)]), capture_output=True, text=True, timeout=30)
    assert r.returncode == 126
    assert r.stderr.startswith("mirl-prelude: bind mount of the missing directory: [Errno "), r.stderr
    assert not marker.exists()


def test_an_unknown_step_is_refused(tmp_path):
    r = subprocess.run(prelude_argv([("chroot", b"/")], ["true"]), capture_output=True, text=True, timeout=30)
    assert r.returncode == 126 and "unknown step: 'chroot'" in r.stderr


def test_pidns_makes_the_command_pid_1_with_its_own_proc_and_passes_its_exit_code():
    from mirl.sandbox import local_backend
    from tests.real import missing

    if not local_backend.unshare_works():
        missing("root and a working `unshare --mount --propagation private`", "run as root where mounts are allowed")
    script = "echo $$; ls /proc | grep -c '^[0-9]'; exit 7"
    r = subprocess.run(prelude_argv([("unshare",), ("pidns",)], ["sh", "-c", script]), capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 7, r.stderr
    pid, seen = r.stdout.split()
    assert pid == "1" and int(seen) <= 3  # sh and ls (and grep): none of the host's processes


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def _wait_for_child(proc: subprocess.Popen) -> int:
    import time

    for _ in range(200):
        kids = _children(proc.pid)
        if kids:
            return kids[0]
        time.sleep(0.02)
    raise AssertionError("the namespace's PID 1 never started")


def test_pidns_reports_a_signal_as_128_plus_it_and_its_pid_1_dies_with_the_parent():
    import os
    import signal
    import time

    from mirl.sandbox import local_backend
    from tests.real import missing

    if not local_backend.unshare_works():
        missing("root and a working `unshare --mount --propagation private`", "run as root where mounts are allowed")
    argv = prelude_argv([("unshare",), ("pidns",)], ["sleep", "30"])
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
    os.kill(_wait_for_child(proc), signal.SIGKILL)  # from outside the namespace, by its host PID
    assert proc.wait(timeout=10) == 128 + 9
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
    inner = _wait_for_child(proc)
    proc.kill()  # the host's handle killed: the namespace goes with it
    proc.wait(timeout=10)
    for _ in range(200):
        if not os.path.exists(f"/proc/{inner}") or open(f"/proc/{inner}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.02)
    else:
        raise AssertionError("the namespace's PID 1 outlived the process the host started")
