"""Shared fixtures: a Docker-API engine and a bwrap sandbox for real-sandbox tests, and a writer of small Harbor tasks."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest

# litellm fetches a price map from the network at import unless told to use its bundled copy
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.real import missing


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

    With neither an engine nor podman, or when podman's service does not start, `missing()`:
    a failure under the README's set-up, a skip saying what to install elsewhere. The service is
    left running for other test runs; `mirl.sandbox.podman.stop_service()` ends it.
    """
    from mirl.sandbox.base import SandboxError
    from mirl.sandbox.podman import ensure_service, find_engine

    if find_engine() is None and shutil.which("podman") is None:
        missing("a Docker-API engine: none answers (DOCKER_HOST, podman's socket) and podman is not installed",
                "`apt-get install podman runc`, or run Docker and set DOCKER_HOST")
    try:
        return ensure_service()
    except SandboxError as e:
        missing(f"a Docker-API engine: {e}")


@pytest.fixture(scope="session")
def docker_sandbox(docker_host):
    """A DockerSandbox on the engine, with the base image imported (built from the rootfs if needed)."""
    from mirl.sandbox import image
    from mirl.sandbox.base import SandboxConfig, SandboxError
    from mirl.sandbox.docker_backend import DockerSandbox

    if image.rootfs_state() == "missing" and shutil.which("debootstrap") is None:
        missing("the base root filesystem, and debootstrap to build it", "`apt-get install debootstrap` then `mirl image build`")
    sandbox = DockerSandbox(SandboxConfig(backend="docker"))
    try:
        sandbox.base_image()
    except SandboxError as e:
        missing(f"the base image {sandbox.config.base_image}: {e}", "`mirl image build`")
    return sandbox


def require_bwrap(config=None):
    """A BwrapSandbox, or `missing()` saying why the bwrap backend cannot run here.

    For fixtures and helpers of any test file: under the README's set-up a missing or broken
    bubblewrap, root or base root filesystem fails the test with the reason.
    """
    from mirl.sandbox import bwrap_backend
    from mirl.sandbox.base import SandboxConfig

    reason = bwrap_backend.problem()
    if reason is not None:
        missing(f"the bwrap backend: {reason}")
    return bwrap_backend.BwrapSandbox(config or SandboxConfig(backend="bwrap"))


@pytest.fixture(scope="session")
def bwrap_sandbox():
    """A BwrapSandbox on the base root filesystem (see `require_bwrap`)."""
    return require_bwrap()


@pytest.fixture
def task_factory(tmp_path):
    """`task_factory(name, **write_task_kwargs)` -> a loaded `Task` written under tmp_path."""
    from mirl.tasks import load_task

    def make(name: str = "task", **kwargs):
        return load_task(write_task(tmp_path / name, **kwargs))

    return make


@pytest.fixture(scope="session")
def mirl_kernel(tmp_path_factory):
    """JUPYTER_PATH holding a `mirl` kernelspec for this interpreter (as scripts/setup.sh registers one)."""
    from tests.batch.batch_pipeline import register_kernel

    path = register_kernel(tmp_path_factory.mktemp("kernel"))
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = path
    yield path
    if old is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = old
