"""Read task directories into `Task` records, collecting every problem with file and field."""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from mirl.tasks import dockerfile as dockerfile_mod
from mirl.tasks.model import Task, TaskInvalid, TaskProblem

DEFAULT_AGENT_TIMEOUT_S = 600.0
DEFAULT_VERIFIER_TIMEOUT_S = 600.0
DEFAULT_BUILD_TIMEOUT_S = 600.0


class _Problems:
    def __init__(self, task: str):
        self.task, self.items = task, []

    def add(self, file: str, field: str, message: str) -> None:
        self.items.append(TaskProblem(self.task, file, field, message))


def _number(p: _Problems, file: str, field: str, value: Any, default: float, *, positive=True) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        p.add(file, field, f"must be a number, got {value!r}")
        return default
    if not math.isfinite(value) or (positive and value <= 0):
        p.add(file, field, f"must be a positive number, got {value!r}")
        return default
    return float(value)


def _memory_mb(p: _Problems, env: dict) -> int:
    if "memory_mb" in env:
        return int(_number(p, "task.toml", "environment.memory_mb", env["memory_mb"], 2048))
    if "memory" in env:  # newer Harbor: memory = "2G" / "512M"
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(env["memory"]), re.I)
        if not m:
            p.add("task.toml", "environment.memory", f"must look like '2G' or '512M', got {env['memory']!r}")
            return 2048
        scale = {"": 1 / 2**20, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}[m.group(2).upper()]
        return max(1, int(float(m.group(1)) * scale))
    return 2048


def _table(p: _Problems, data: dict, name: str) -> dict:
    value = data.get(name, {})
    if not isinstance(value, dict):
        p.add("task.toml", name, f"must be a table, got {type(value).__name__}")
        return {}
    return value


def _dockerfile_facts(p: _Problems, path: Path, rel: str) -> tuple[str, dict[str, str]]:
    try:
        df = dockerfile_mod.parse(path)
    except OSError as e:
        p.add(rel, "", f"cannot read: {e}")
        return "/", {}
    if not df.base_image:
        p.add(rel, "FROM", "no FROM line")
    return df.workdir, df.env


def _load_harbor(root: Path, p: _Problems) -> dict[str, Any]:
    fields: dict[str, Any] = {"layout": "harbor"}
    instruction = root / "instruction.md"
    if not instruction.is_file():
        p.add("instruction.md", "", "missing")
        fields["instruction"] = ""
    else:
        fields["instruction"] = instruction.read_text(encoding="utf-8", errors="replace")
        if not fields["instruction"].strip():
            p.add("instruction.md", "", "is empty")
    data: dict[str, Any] = {}
    try:
        if not (root / "task.toml").is_file():
            raise FileNotFoundError("missing")
        data = tomllib.loads((root / "task.toml").read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        p.add("task.toml", "", f"not valid TOML: {e}")
    except FileNotFoundError:
        p.add("task.toml", "", "missing")
    except OSError as e:
        p.add("task.toml", "", f"cannot read: {e}")
    meta, verifier = _table(p, data, "metadata"), _table(p, data, "verifier")
    agent, env = _table(p, data, "agent"), _table(p, data, "environment")
    fields["metadata"] = meta
    fields["agent_timeout_s"] = _number(p, "task.toml", "agent.timeout_sec", agent.get("timeout_sec"), DEFAULT_AGENT_TIMEOUT_S)
    fields["verifier_timeout_s"] = _number(p, "task.toml", "verifier.timeout_sec", verifier.get("timeout_sec"), DEFAULT_VERIFIER_TIMEOUT_S)
    fields["build_timeout_s"] = _number(p, "task.toml", "environment.build_timeout_sec", env.get("build_timeout_sec"), DEFAULT_BUILD_TIMEOUT_S)
    fields["cpus"] = _number(p, "task.toml", "environment.cpus", env.get("cpus"), 1.0)
    fields["memory_mb"] = _memory_mb(p, env)
    allow = env.get("allow_internet", False)
    if not isinstance(allow, bool):
        p.add("task.toml", "environment.allow_internet", f"must be true or false, got {allow!r}")
        allow = False
    fields["allow_internet"] = allow
    venv = verifier.get("env", {})
    fields["verifier_env"] = {str(k): str(v) for k, v in venv.items()} if isinstance(venv, dict) else {}

    image = env.get("docker_image")
    if image is not None and (not isinstance(image, str) or not image.strip()):
        p.add("task.toml", "environment.docker_image", f"must be a non-empty string, got {image!r}")
        image = None
    dockerfile = root / "environment" / "Dockerfile"
    has_df = dockerfile.is_file()
    if image and has_df:
        p.add("task.toml", "environment.docker_image", "both docker_image and environment/Dockerfile are given; keep one")
    if not image and not has_df:
        p.add("environment/Dockerfile", "", "missing, and task.toml has no environment.docker_image")
    fields["image"] = image if image else None
    fields["dockerfile"] = dockerfile if has_df and not image else None
    fields["workdir"], fields["env"] = ("/", {})
    if fields["dockerfile"]:
        fields["workdir"], fields["env"] = _dockerfile_facts(p, dockerfile, "environment/Dockerfile")

    fields["tests_dir"] = root / "tests"
    fields["test_script"] = root / "tests" / "test.sh"
    if not fields["test_script"].is_file():
        p.add("tests/test.sh", "", "missing")
    solve = root / "solution" / "solve.sh"
    fields["solution"] = solve if solve.is_file() else None
    return fields


def _load_terminal_bench(root: Path, p: _Problems) -> dict[str, Any]:
    fields: dict[str, Any] = {"layout": "terminal-bench"}
    data: dict[str, Any] = {}
    try:
        loaded = yaml.safe_load((root / "task.yaml").read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            data = loaded
        else:
            p.add("task.yaml", "", "must be a mapping")
    except yaml.YAMLError as e:
        p.add("task.yaml", "", f"not valid YAML: {e}")
    instruction = data.get("instruction")
    if instruction is None and isinstance(data.get("descriptions"), list) and data["descriptions"]:
        instruction = data["descriptions"][0].get("description")  # the oldest TB layout
    if not isinstance(instruction, str) or not instruction.strip():
        p.add("task.yaml", "instruction", "missing or empty")
        instruction = ""
    fields["instruction"] = instruction
    fields["agent_timeout_s"] = _number(p, "task.yaml", "max_agent_timeout_sec", data.get("max_agent_timeout_sec"), DEFAULT_AGENT_TIMEOUT_S)
    fields["verifier_timeout_s"] = _number(p, "task.yaml", "max_test_timeout_sec", data.get("max_test_timeout_sec"), DEFAULT_VERIFIER_TIMEOUT_S)
    fields["build_timeout_s"] = DEFAULT_BUILD_TIMEOUT_S
    fields["cpus"], fields["memory_mb"] = 1.0, 2048
    fields["allow_internet"] = True  # TB1 containers had network; the run still decides
    fields["metadata"] = {k: v for k, v in data.items() if k not in ("instruction", "descriptions")}
    fields["verifier_env"] = {}
    dockerfile = root / "Dockerfile"
    fields["image"] = None
    fields["dockerfile"] = dockerfile if dockerfile.is_file() else None
    fields["workdir"], fields["env"] = "/", {}
    if fields["dockerfile"]:
        fields["workdir"], fields["env"] = _dockerfile_facts(p, dockerfile, "Dockerfile")
    else:
        p.add("Dockerfile", "", "missing")
    fields["tests_dir"] = root / "tests"
    fields["test_script"] = root / "run-tests.sh"
    if not fields["test_script"].is_file():
        p.add("run-tests.sh", "", "missing")
    solve = root / "solution.sh"
    fields["solution"] = solve if solve.is_file() else None
    return fields


def validate_task(path: str | Path) -> list[TaskProblem]:
    """Every problem with the task directory at `path`; empty when it loads."""
    try:
        load_task(path)
    except TaskInvalid as e:
        return e.problems
    return []


def load_task(path: str | Path) -> Task:
    """Load one task directory (Harbor or Terminal-Bench 1); raise TaskInvalid listing all problems."""
    root = Path(path).resolve()
    p = _Problems(root.name)
    if not root.is_dir():
        raise TaskInvalid([TaskProblem(root.name, "", "", f"not a directory: {path}")])
    if (root / "task.toml").is_file() or (root / "instruction.md").is_file():
        fields = _load_harbor(root, p)
    elif (root / "task.yaml").is_file():
        fields = _load_terminal_bench(root, p)
    else:
        p.add("task.toml", "", "missing (neither a Harbor task.toml nor a Terminal-Bench task.yaml)")
        raise TaskInvalid(p.items)
    if p.items:
        raise TaskInvalid(p.items)
    return Task(id=root.name, path=root, **fields)


def is_task_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in ("task.toml", "task.yaml", "instruction.md"))


def find_tasks(*paths: str | Path) -> list[Path]:
    """Task directories named directly or found one level below the given paths, sorted, unique."""
    found: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if is_task_dir(path):
            found.add(path.resolve())
        elif path.is_dir():
            found.update(child.resolve() for child in path.iterdir() if child.is_dir() and is_task_dir(child))
    return sorted(found)
