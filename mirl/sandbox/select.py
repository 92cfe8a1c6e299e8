"""Choose a backend by name; `auto` prefers a Docker-API engine, then bubblewrap, never local."""

from __future__ import annotations

from mirl.sandbox.base import Sandbox, SandboxConfig, SandboxError

BACKENDS = ("docker", "bwrap", "local")


def make_sandbox(config: SandboxConfig | str | None = None) -> Sandbox:
    if config is None:
        config = SandboxConfig()
    elif isinstance(config, str):
        config = SandboxConfig(backend=config)
    name = config.backend
    if name == "auto":
        from mirl.sandbox import bwrap_backend, docker_backend

        if docker_backend.engine_available():
            name = "docker"
        elif bwrap_backend.available():
            name = "bwrap"
        else:
            raise SandboxError(
                "no sandbox available: start a Docker or Podman engine (set DOCKER_HOST to its socket; "
                "`apt-get install podman runc`), or install bubblewrap (`apt-get install bubblewrap`) and "
                "build the base image with `mirl image build`"
            )
    if name == "docker":
        from mirl.sandbox.docker_backend import DockerSandbox

        return DockerSandbox(config)
    if name == "bwrap":
        from mirl.sandbox.bwrap_backend import BwrapSandbox

        return BwrapSandbox(config)
    if name == "local":
        from mirl.sandbox.local_backend import LocalSandbox

        return LocalSandbox(config)
    raise SandboxError(f"unknown sandbox backend {name!r}; choose one of auto, {', '.join(BACKENDS)}")
