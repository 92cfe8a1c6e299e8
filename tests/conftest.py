"""Shared fixtures: a Docker-API engine for container tests, and a writer of small Harbor tasks."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest


def write_task(root: Path, dockerfile: str = "FROM mirl-base\nWORKDIR /app\n", test_sh: str | None = None,
               files: dict[str, str] | None = None, toml: str = "", instruction: str = "Do the thing.\n") -> Path:
    """A minimal Harbor task directory at `root`; `files` go into environment/ (the build context)."""
    (root / "environment").mkdir(parents=True, exist_ok=True)
    (root / "tests").mkdir(exist_ok=True)
    (root / "instruction.md").write_text(instruction)
    (root / "task.toml").write_text(textwrap.dedent(toml) or "[verifier]\ntimeout_sec = 60.0\n")
    (root / "environment" / "Dockerfile").write_text(textwrap.dedent(dockerfile))
    for name, text in (files or {}).items():
        path = root / "environment" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if test_sh is None:
        test_sh = "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
    (root / "tests" / "test.sh").write_text(textwrap.dedent(test_sh))
    return root


@pytest.fixture(scope="session")
def docker_host():
    """DOCKER_HOST of an answering Docker-API engine, starting podman's service when needed.

    Skips (saying what to install) when there is neither an engine nor podman. The service is
    left running for other test runs; `mirl.sandbox.podman.stop_service()` ends it.
    """
    from mirl.sandbox.base import SandboxError
    from mirl.sandbox.podman import ensure_service, find_engine

    if find_engine() is None and shutil.which("podman") is None:
        pytest.skip("needs a Docker-API engine: `apt-get install podman runc` (or run Docker and set DOCKER_HOST)")
    try:
        return ensure_service()
    except SandboxError as e:
        pytest.skip(f"no Docker-API engine: {e}")


@pytest.fixture(scope="session")
def docker_sandbox(docker_host):
    """A DockerSandbox on the engine, with the base image imported (built from the rootfs if needed)."""
    from mirl.sandbox import image
    from mirl.sandbox.base import SandboxConfig, SandboxError
    from mirl.sandbox.docker_backend import DockerSandbox

    if image.rootfs_state() == "missing" and shutil.which("debootstrap") is None:
        pytest.skip("needs the base root filesystem: `apt-get install debootstrap` then `mirl image build`")
    sandbox = DockerSandbox(SandboxConfig(backend="docker"))
    try:
        sandbox.base_image()
    except SandboxError as e:
        pytest.skip(f"base image unavailable: {e}")
    return sandbox


@pytest.fixture
def task_factory(tmp_path):
    """`task_factory(name, **write_task_kwargs)` -> a loaded `Task` written under tmp_path."""
    from mirl.tasks import load_task

    def make(name: str = "task", **kwargs):
        return load_task(write_task(tmp_path / name, **kwargs))

    return make
