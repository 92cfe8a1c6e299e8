"""docker-compose environments, read for the one case we can run: a single service the agent works in.

Harbor names that service `main` (environment/docker-compose.yaml); Terminal-Bench 1 names it `client`
and falls back to a default compose file that builds the task's Dockerfile. Such a file is the plain
Dockerfile (or image) environment plus a few settings, so it loads as one. A file with any other
service is refused at load time, naming the services: running the agent's container without its
database or web server would score the agent on a broken environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mirl.tasks.model import read_task_file

# Terminal-Bench 1 fills these into its compose files; inside the container they are fixed paths.
TB1_VARIABLES = {
    "T_BENCH_TEST_DIR": "/tests",
    "T_BENCH_CONTAINER_LOGS_PATH": "/logs",
    "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/logs/agent",
}
# Settings of the service that a single sandbox container needs no translation for.
# command, entrypoint and volumes are read below: a keep-alive command and the log mounts need nothing; the
# resource limits and `network_mode: none` become the task's own settings
SERVICE_KEYS = {"build", "image", "container_name", "command", "entrypoint", "environment", "volumes", "tty",
                "stdin_open", "init", "hostname", "deploy", "networks", "network_mode", "restart", "platform",
                "mem_limit", "cpus"}
# a command that only keeps the container alive (what the sandbox does anyway), with or without `sh -c`
KEEP_ALIVE = re.compile(r"\s*(?:(?:/bin/)?(?:ba)?sh\s+-c\s+)?[\"']?\s*(?:sleep\s+(?:infinity|\d+)|tail\s+-f\s+/dev/null)"
                        r"\s*[\"']?\s*")
TOP_KEYS = {"version", "services", "networks", "volumes", "name"}


@dataclass
class ComposeEnv:
    """What a single-service compose file amounts to."""

    dockerfile: Path | None = None
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # the service's `environment:`, ${VAR} left for the host
    notes: list[str] = field(default_factory=list)
    memory_mb: int | None = None  # deploy.resources.limits.memory (or mem_limit)
    cpus: float | None = None  # deploy.resources.limits.cpus (or cpus)
    allow_internet: bool | None = None  # False for `network_mode: none`


def _substitute_tb1(value: str) -> str:
    for name, fixed in TB1_VARIABLES.items():
        value = value.replace("${" + name + "}", fixed).replace("$" + name, fixed)
    return value


def _environment(raw: Any, add) -> dict[str, str]:
    if raw is None:
        return {}
    items: list[tuple[str, str]] = []
    if isinstance(raw, dict):
        items = [(str(k), "" if v is None else str(v)) for k, v in raw.items()]
    elif isinstance(raw, list):
        for entry in raw:
            key, eq, value = str(entry).partition("=")
            items.append((key, value if eq else "${" + key + ":-}"))  # a bare name passes the host's value
    else:
        add("environment", f"must be a list or a mapping, got {type(raw).__name__}")
    return {k: _substitute_tb1(v) for k, v in items}


def read(path: Path, rel: str, main: str, add) -> ComposeEnv:
    """Read `path` (shown as `rel`); `add(field, message)` records a problem. `main`: the agent's service."""
    out = ComposeEnv()
    try:
        data = yaml.safe_load(read_task_file(path))
    except ValueError as e:
        add("", str(e))
        return out
    except yaml.YAMLError as e:
        add("", f"not valid YAML: {e}")
        return out
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or not services:
        add("services", "must be a mapping with the service the agent works in")
        return out
    extra = sorted(str(s) for s in services if s != main)
    if extra:
        add("services", f"defines {', '.join(extra)} besides `{main}`: environments of several containers are not "
                         "supported, and the task is refused rather than run without them")
    if main not in services:
        add("services", f"has no service `{main}` (the container the agent works in)")
        return out
    svc = services[main]
    if not isinstance(svc, dict):
        add(f"services.{main}", "must be a mapping")
        return out
    out.notes += [f"{rel}: {key} is not applied" for key in sorted(set(data) - TOP_KEYS)]
    out.notes += [f"{rel}: services.{main}.{key} is not applied" for key in sorted(set(svc) - SERVICE_KEYS)]
    out.env = _environment(svc.get("environment"), lambda f, m: add(f"services.{main}.{f}", m))
    _settings(svc, out, f"{rel}: services.{main}")
    build, image = svc.get("build"), svc.get("image")
    if build is not None:
        if isinstance(build, str):
            build = {"context": build}
        if not isinstance(build, dict):
            add(f"services.{main}.build", "must be a path or a mapping")
            return out
        context = str(build.get("context", "."))
        if "$" in context:  # Terminal-Bench passes the task's own directory here
            context = "."
        ctx = (path.parent / context).resolve()
        dockerfile = (ctx / str(build.get("dockerfile", "Dockerfile"))).resolve()
        if dockerfile.parent != ctx:
            add(f"services.{main}.build.dockerfile", "must lie directly in the build context")
        elif not dockerfile.is_file():
            add(f"services.{main}.build", f"no Dockerfile at {dockerfile.name} in {context}")
        else:
            out.dockerfile = dockerfile
    elif isinstance(image, str) and image.strip() and "$" not in image:
        out.image = image.strip()
    else:
        add(f"services.{main}", "needs a build (a Dockerfile) or a fixed image")
    return out


def _size_mb(value: Any) -> int | None:
    """A compose memory size ("512M", "1.5g", "2GB", a number of bytes) in MB; None when unreadable or 0
    (Docker's "no limit")."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", str(value), re.I)
    if not m or float(m.group(1)) <= 0:
        return None
    scale = {"": 1 / 2**20, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2}[m.group(2).lower()]
    return max(1, int(float(m.group(1)) * scale))


def _settings(svc: dict[str, Any], out: ComposeEnv, where: str) -> None:
    """Resource limits and `network_mode: none` as the task's settings; a command other than a keep-alive
    and volumes other than the log mounts as notes (the sandbox starts its own container)."""
    deploy = svc.get("deploy") if isinstance(svc.get("deploy"), dict) else {}
    resources = deploy.get("resources") if isinstance(deploy.get("resources"), dict) else {}
    limits = resources.get("limits") if isinstance(resources.get("limits"), dict) else {}
    # a value compose would interpolate (${MEM:-2g}) or cannot read is said, never a reason to refuse the task
    memory = limits.get("memory", svc.get("mem_limit"))
    if memory is not None and str(memory).strip() not in ("0", ""):
        out.memory_mb = _size_mb(memory)
        if out.memory_mb is None:
            out.notes.append(f"{where}: memory limit {memory!r} is not applied (not a size like '512M')")
    cpus = limits.get("cpus", svc.get("cpus"))
    if cpus is not None:
        try:
            out.cpus = float(cpus) if float(cpus) > 0 else None  # 0: no limit
        except (TypeError, ValueError):
            out.notes.append(f"{where}: cpus limit {cpus!r} is not applied (not a number)")
    if svc.get("network_mode") == "none":
        out.allow_internet = False
    for key in ("command", "entrypoint"):
        value = svc.get(key)
        text = " ".join(map(str, value)) if isinstance(value, list) else str(value or "")
        if text and not KEEP_ALIVE.fullmatch(text):
            out.notes.append(f"{where}.{key} is not applied ({text[:80]!r}): the sandbox starts the container its own way")
    for volume in svc.get("volumes") or []:
        target = volume.get("target") if isinstance(volume, dict) else _substitute_tb1(str(volume)).split(":")[1:2]
        target = target[0] if isinstance(target, list) and target else target
        if not (isinstance(target, str) and (target == "/logs" or target.startswith("/logs/"))):
            out.notes.append(f"{where}.volumes: {volume!r} is not mounted (only the log directories are)")
