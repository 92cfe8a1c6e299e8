"""The local backend: temp copies of task files, absolute paths through a private mount namespace."""

from __future__ import annotations

import logging
import os

import pytest
from sandbox_helpers import data_task

from mirl.sandbox import local_backend
from mirl.sandbox.base import SandboxConfig
from mirl.sandbox.select import make_sandbox
from tests.real import missing

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def sandbox():
    return make_sandbox(SandboxConfig(backend="local"))


def test_warns_that_it_is_unconfined_and_skips_installs(sandbox, caplog):
    caplog.set_level(logging.WARNING, logger="mirl.sandbox.local_backend")
    with sandbox.start(data_task("contract-basic")):
        pass
    assert "UNCONFINED" in caplog.text
    assert "skipping Dockerfile line 11" in caplog.text


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
