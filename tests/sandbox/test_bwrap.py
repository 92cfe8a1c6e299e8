"""The bubblewrap backend: its layer building and its confinement (its speed: benchmarks/sandbox.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sandbox_helpers import data_task

from mirl.sandbox import bwrap_backend
from mirl.sandbox.base import SandboxConfig, SandboxError
from mirl.sandbox.select import make_sandbox

pytestmark = [pytest.mark.bwrap, pytest.mark.timeout(120)]


@pytest.fixture
def sandbox(bwrap_sandbox):
    """The backend as users get it (`make_sandbox`), once `bwrap_sandbox` found it can run here."""
    return make_sandbox(SandboxConfig(backend="bwrap"))


def test_missing_rootfs_says_how_to_build_it(monkeypatch, tmp_path, sandbox):
    monkeypatch.setenv("MIRL_CACHE", str(tmp_path))
    assert not bwrap_backend.available()
    with pytest.raises(SandboxError, match="mirl image build"):
        sandbox.start(data_task("contract-basic"))


def test_from_image_is_substituted_and_logged(sandbox, caplog):
    caplog.set_level(logging.INFO, logger="mirl.sandbox.bwrap_backend")
    with sandbox.start(data_task("contract-basic")) as s:
        assert s.run("cat /etc/debian_version").exit_code == 0
    assert "ghcr.io/example/unpullable-base:1.0" in caplog.text


def test_installing_missing_packages_is_refused_naming_the_line(sandbox, task_factory):
    task = task_factory("apt", dockerfile="FROM ubuntu:24.04\nWORKDIR /app\nRUN apt-get update && apt-get install -y cowsay-mirl-missing\n")
    with pytest.raises(SandboxError, match=r"line 3.*cowsay-mirl-missing.*docker"):
        sandbox.start(task)
    task = task_factory("pip", dockerfile="FROM python:3.12\nRUN pip install no-such-dist-mirl==1.0\n")
    with pytest.raises(SandboxError, match=r"line 2.*no-such-dist-mirl"):
        sandbox.start(task)
    task = task_factory("curl", dockerfile="FROM debian\nRUN curl -fsSL https://example.com/x.sh | sh\n")
    with pytest.raises(SandboxError, match="downloads"):
        sandbox.start(task)


def test_installing_present_packages_runs_with_shims(sandbox, task_factory):
    task = task_factory(
        "present",
        dockerfile="FROM ubuntu\nRUN apt-get update && apt-get install -y python3 git && pip3 install pytest && touch /made\n",
    )
    with sandbox.start(task) as s:
        assert s.run("test -f /made && ! test -e /.mirl-build && echo ok").output.strip() == "ok"


def test_failing_run_line_reports_its_output(sandbox, task_factory):
    task = task_factory("fails", dockerfile="FROM x\nRUN echo about-to-fail && false\n")
    with pytest.raises(SandboxError, match=r"(?s)about-to-fail.*line 2"):
        sandbox.start(task)


def test_layer_is_built_once_and_reused(sandbox, task_factory):
    task = task_factory("cached", dockerfile="FROM x\nWORKDIR /w\nRUN cat /proc/sys/kernel/random/uuid > /w/random\n")
    with sandbox.start(task) as s:
        first = s.run("cat /w/random").output
    assert len(first.strip()) == 36, first  # the RUN line ran once (RUN is /bin/sh: no $RANDOM) ...
    with sandbox.start(task) as s:
        assert s.run("cat /w/random").output == first  # ... and not again


def test_no_admin_capabilities_inside(sandbox):
    with sandbox.start(data_task("contract-basic")) as s:
        assert s.run("mount -t tmpfs none /mnt").exit_code != 0
        assert s.run("mknod /tmp/disk b 8 0").exit_code != 0
        eff = s.run("grep CapEff /proc/self/status").output.split()[1]
        assert not int(eff, 16) & (1 << 21), "CAP_SYS_ADMIN must be dropped"
        assert s.run("echo 1 > /proc/sys/vm/drop_caches").exit_code != 0


def test_close_leaves_no_mounts_or_temp_dirs(sandbox):
    s = sandbox.start(data_task("contract-basic"))
    tmp, pid = str(s.tmp), s.box.proc.pid
    assert s.run("echo data > /app/x && cat /app/x").output == "data\n"
    with open(f"/proc/{pid}/mountinfo") as f:  # the overlay exists, in the sandbox's own namespace only
        assert f"{tmp}/root" in f.read()
    s.close()
    for mounts in ("/proc/self/mountinfo", "/proc/1/mountinfo"):
        with open(mounts) as f:
            assert tmp not in f.read()
    assert not Path(f"/proc/{pid}").exists() and not s.tmp.exists()


def test_starting_a_box_never_forks_the_interpreter(sandbox):
    """The overlay and the cgroups are set up in bwrap's own process before it execs
    (`mirl.sandbox.prelude`), not in a preexec_fn, which forks with the GIL held: no at-fork hook runs."""
    import os

    forks, watch = [], []
    os.register_at_fork(before=lambda: forks.append(1) if watch else None)
    watch.append(True)
    try:
        with sandbox.start(data_task("contract-basic")) as s:
            assert s.run("cat /etc/debian_version").exit_code == 0
    finally:
        watch.clear()
    assert forks == []


def test_an_overlay_that_cannot_be_mounted_says_so(sandbox, monkeypatch):
    monkeypatch.setattr(bwrap_backend, "_overlay_steps", lambda *a: [
        ("unshare",), ("mount", b"overlay", b"/nonexistent-merged", b"overlay", 0, b"lowerdir=/", "mount overlay")])
    with pytest.raises(SandboxError, match=r"mounting the overlay failed: .*mirl-prelude: mount overlay: \[Errno"):
        sandbox.start(data_task("contract-basic"))
