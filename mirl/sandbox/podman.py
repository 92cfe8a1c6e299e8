"""A Docker-API engine without Docker: start (or reuse) `podman system service` on a cache socket.

The docker backend only speaks the Docker Engine API. Machines without a Docker daemon can still
serve that API with podman; `ensure_service()` finds an answering engine (DOCKER_HOST, then our
own socket) or starts podman on `user_cache_dir()/podman.sock`, and returns the DOCKER_HOST url.
The service is left running on purpose, like a daemon: other processes reuse the socket, and
`stop_service()` ends it. crun fails on some hosts (cgroup hybrid mode), so the generated
containers.conf selects runc and sets default ulimits.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from mirl.sandbox.base import SandboxError, user_cache_dir

log = logging.getLogger(__name__)

DEFAULT_ULIMITS = {"nofile": (1024, 1024), "nproc": (4096, 4096)}  # a request's own ulimits replace these
CONTAINERS_CONF = f"""\
[engine]
runtime = "runc"
[containers]
default_ulimits = [{", ".join(f'"{k}={a}:{b}"' for k, (a, b) in DEFAULT_ULIMITS.items())}]
"""


def socket_path() -> Path:
    return Path(user_cache_dir()) / "podman.sock"


def pid_path() -> Path:
    return Path(user_cache_dir()) / "podman.pid"


def containers_conf() -> Path:
    """Write (if changed) and return the containers.conf the podman service and CLI use."""
    path = Path(user_cache_dir()) / "containers.conf"
    if not path.is_file() or path.read_text() != CONTAINERS_CONF:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(CONTAINERS_CONF)
        tmp.replace(path)
    return path


def podman_env() -> dict[str, str]:
    """Environment for podman CLI calls (import, build) so they use the same runtime settings."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(containers_conf()))
    return env


def podman_installed() -> bool:
    return shutil.which("podman") is not None


def _ping_unix(path: str, timeout: float = 2.0) -> bool:
    """True when a Docker-API server answers GET /_ping on the unix socket `path`."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            data = s.recv(256)
        return data.startswith(b"HTTP/1.") and b" 200 " in data.split(b"\r\n", 1)[0] + b" "
    except OSError:
        return False


def ping(url: str | None, timeout: float = 2.0) -> bool:
    """True when the engine at a DOCKER_HOST url answers; unix sockets are checked without the SDK."""
    if not url:
        return False
    if url.startswith("unix://"):
        return _ping_unix(url[len("unix://"):], timeout)
    try:
        import docker

        client = docker.DockerClient(base_url=url, timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _engine_url_candidates() -> list[str]:
    urls = []
    if os.environ.get("DOCKER_HOST"):
        urls.append(os.environ["DOCKER_HOST"])
    urls.append(f"unix://{socket_path()}")
    if os.path.exists("/var/run/docker.sock"):
        urls.append("unix:///var/run/docker.sock")
    return urls


def find_engine() -> str | None:
    """The url of an engine that answers now (DOCKER_HOST first), or None; starts nothing."""
    for url in _engine_url_candidates():
        if ping(url):
            return url
    return None


def ensure_service(timeout: float = 30.0, set_env: bool = True) -> str:
    """Return a DOCKER_HOST url that answers, starting a podman service if none does.

    With `set_env`, DOCKER_HOST is set in this process so the docker SDK (and child processes)
    find the engine. Raises SandboxError saying what to install when there is no way to get one.
    """
    url = find_engine()
    if url is None:
        if not podman_installed():
            raise SandboxError(
                "no Docker-API engine answers (DOCKER_HOST unset or not answering) and podman is not "
                "installed: `apt-get install podman runc`, or start Docker and set DOCKER_HOST"
            )
        url = _start_podman(timeout)
    if set_env:
        os.environ["DOCKER_HOST"] = url
    return url


def _start_podman(timeout: float) -> str:
    sock = socket_path()
    url = f"unix://{sock}"
    sock.parent.mkdir(parents=True, exist_ok=True)
    # Several processes (parallel test runs) may race to start the service: one starts, the rest wait.
    with open(sock.parent / "podman.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _ping_unix(str(sock)):
            return url
        if sock.exists():
            sock.unlink()
        logfile = open(sock.parent / "podman-service.log", "ab")
        proc = subprocess.Popen(
            ["podman", "system", "service", "--time=0", url],
            env=podman_env(),
            stdin=subprocess.DEVNULL,
            stdout=logfile,
            stderr=logfile,
            start_new_session=True,  # outlives this process, like a daemon
            cwd=sock.parent,  # not the starter's directory: conmon writes files (an `oom` marker) into its cwd
        )
        logfile.close()
        pid_path().write_text(str(proc.pid))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _ping_unix(str(sock), timeout=1.0):
                log.info("started podman service (pid %d) on %s", proc.pid, url)
                return url
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        if proc.poll() is None:
            proc.kill()
        tail = (sock.parent / "podman-service.log").read_text(errors="replace").splitlines()[-5:]
        raise SandboxError(
            f"podman system service did not answer on {sock} within {timeout:.0f} s; "
            f"last log lines: {' | '.join(tail) or '(none)'}"
        )


def stop_service() -> bool:
    """Stop the podman service started by `ensure_service`; True if one was running."""
    try:
        pid = int(pid_path().read_text().strip())
    except (OSError, ValueError):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        cmdline = b""
    pid_path().unlink(missing_ok=True)
    if b"podman" not in cmdline or b"service" not in cmdline:
        return False  # the pid was reused by something else
    os.kill(pid, signal.SIGTERM)
    return True
