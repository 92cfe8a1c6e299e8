"""The `sandbox` fixture: one real sandbox per available backend, for suites every backend must pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirl.tasks import load_task

DATA = Path(__file__).resolve().parents[1] / "data" / "tasks"
BACKENDS = ("docker", "bwrap", "local")
CONFINED = ("docker", "bwrap")  # local runs on the host: confinement tests do not apply to it


def data_task(name: str):
    return load_task(DATA / name)


@pytest.fixture(params=BACKENDS)
def sandbox(request):
    """A Sandbox of each backend, skipped with what to install when that backend is unavailable."""
    name = request.param
    if name == "docker":
        return request.getfixturevalue("docker_sandbox")
    if name == "bwrap":
        from mirl.sandbox import bwrap_backend

        if not bwrap_backend.available():
            pytest.skip(
                "bwrap backend unavailable: needs root, `apt-get install bubblewrap` and the base root "
                f"filesystem at {bwrap_backend.rootfs_path()} (`mirl image build`)"
            )
        return bwrap_backend.BwrapSandbox()
    from mirl.sandbox.local_backend import LocalSandbox

    return LocalSandbox()


@pytest.fixture
def confined(sandbox):
    """The sandbox, skipping the local backend, which by design confines nothing."""
    if sandbox.name == "local":
        pytest.skip("the local backend is unconfined by design (throwaway machines only)")
    return sandbox
