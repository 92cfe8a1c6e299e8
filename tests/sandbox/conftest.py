"""The `sandbox` fixture: one real sandbox per backend, for suites every backend must pass."""

from __future__ import annotations

import pytest

BACKENDS = ("docker", "bwrap", "local")


@pytest.fixture(params=BACKENDS)
def sandbox(request):
    """A Sandbox of each backend; an unavailable one is `missing()` (a failure under the README's set-up)."""
    name = request.param
    if name == "docker":
        return request.getfixturevalue("docker_sandbox")
    if name == "bwrap":
        return request.getfixturevalue("bwrap_sandbox")
    from mirl.sandbox.local_backend import LocalSandbox

    return LocalSandbox()


@pytest.fixture
def confined(sandbox):
    """The sandbox, skipping the local backend, which by design confines nothing."""
    if sandbox.name == "local":
        pytest.skip("the local backend is unconfined by design (throwaway machines only)")
    return sandbox
