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
