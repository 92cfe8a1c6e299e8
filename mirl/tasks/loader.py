"""Read task directories into `Task` records, collecting every problem with file and field.

Field names and defaults follow Harbor's task.toml: `cpus`, `memory_mb`, `storage_mb` and `gpus`
unset mean the backend's default, `network_mode` ("public", "no-network", "allowlist") wins over
the older `allow_internet` (default true), `[agent] timeout_sec` unset means no limit. Fields that
are read but not applied are listed in `Task.notes` rather than dropped without a word.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from mirl.tasks import compose as compose_mod
from mirl.tasks import dockerfile as dockerfile_mod
from mirl.tasks.model import Task, TaskInvalid, TaskProblem, TaskStep, read_task_file

DEFAULT_VERIFIER_TIMEOUT_S = 600.0  # Harbor's default
DEFAULT_BUILD_TIMEOUT_S = 600.0
TB1_AGENT_TIMEOUT_S = 360.0  # Terminal-Bench 1's defaults for task.yaml
TB1_TEST_TIMEOUT_S = 60.0
# Terminal-Bench 1 runs this when a task ships no run-tests.sh (ours runs pytest offline, theirs installs it).
TB1_DEFAULT_RUN_TESTS = Path(__file__).with_name("tb1_run_tests.sh")
NETWORK_MODES = ("public", "no-network", "allowlist")

# task.toml keys by table: applied, or read and said in Task.notes when set.
TOP_KEYS = {"version", "schema_version", "metadata", "verifier", "agent", "environment", "solution", "task",
            "source", "steps", "multi_step_reward_strategy"}
APPLIED = {
    "environment": {"build_timeout_sec", "docker_image", "cpus", "memory_mb", "memory", "storage_mb", "storage",
                    "gpus", "allow_internet", "network_mode", "env"},
    "verifier": {"timeout_sec", "env"},
    "agent": {"timeout_sec"},
    "solution": {"env"},
}
NOT_APPLIED = {
    "environment": {"gpu_types", "allowed_hosts", "mcp_servers", "healthcheck", "skills_dir", "workdir"},
    "verifier": {"user", "network_mode", "allowed_hosts"},
    "agent": {"user", "network_mode", "allowed_hosts"},
    "solution": set(),
}
STEP_KEYS = {"name", "min_reward", "agent", "verifier"}
STEP_DIR_ENTRIES = {"instruction.md", "tests", "solution"}


def display_path(root: Path) -> str:
    """The task directory relative to the working directory when it lies below it, else absolute."""
    try:
        return str(root.relative_to(Path.cwd()))
    except ValueError:
        return str(root)


class _Problems:
    def __init__(self, task: str, path: str):
        self.task, self.path, self.items = task, path, []
        self.notes: list[str] = []

    def add(self, file: str, field: str, message: str) -> None:
        self.items.append(TaskProblem(self.task, file, field, message, self.path))


def _number(p: _Problems, file: str, field: str, value: Any, default, *, positive=True):
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        p.add(file, field, f"must be a number, got {value!r}")
        return default
    if not math.isfinite(value) or (positive and value <= 0):
        p.add(file, field, f"must be a positive number, got {value!r}")
        return default
    return float(value)


def _count(p: _Problems, field: str, value: Any) -> int | None:
    """A whole number >= 0 (gpus = 0 is common), or None when unset."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        p.add("task.toml", field, f"must be a whole number >= 0, got {value!r}")
        return None
    return value


def _size_mb(p: _Problems, env: dict, name: str) -> int | None:
    """`<name>_mb` (current Harbor), else the deprecated `<name>` = "2G" / "512M"; None when neither is set."""
    if f"{name}_mb" in env:
        value = _number(p, "task.toml", f"environment.{name}_mb", env[f"{name}_mb"], None)
        if value is not None and not value.is_integer():  # 0.5 is no size: int() would make it 0, no memory
            p.add("task.toml", f"environment.{name}_mb", f"must be a whole number of MB, got {env[f'{name}_mb']!r}")
            return None
        return None if value is None else int(value)
    if name in env:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(env[name]), re.I)
        if not m:
            p.add("task.toml", f"environment.{name}", f"must look like '2G' or '512M', got {env[name]!r}")
            return None
        if float(m.group(1)) <= 0:
            p.add("task.toml", f"environment.{name}", f"must be a positive size, got {env[name]!r}")
            return None
        scale = {"": 1 / 2**20, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}[m.group(2).upper()]
        return max(1, int(float(m.group(1)) * scale))  # under 1 MB (e.g. "512K"): 1 MB
    return None


def _table(p: _Problems, data: dict, name: str, file: str = "task.toml") -> dict:
    value = data.get(name, {})
    if not isinstance(value, dict):
        p.add(file, name, f"must be a table, got {type(value).__name__}")
        return {}
    return value


def _env_table(p: _Problems, file: str, field: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        p.add(file, field, f"must be a table of NAME = \"value\", got {type(value).__name__}")
        return {}
    out = {}
    for key, v in value.items():
        if isinstance(v, (dict, list)):
            p.add(file, f"{field}.{key}", f"must be a string, got {type(v).__name__}")
        else:
            out[str(key)] = str(v).lower() if isinstance(v, bool) else str(v)
    return out


def _notes(p: _Problems, data: dict, tables: dict[str, dict]) -> None:
    p.notes += [f"task.toml: {key} is not a Harbor field; ignored" for key in sorted(set(data) - TOP_KEYS)]
    for name, table in tables.items():
        for key in sorted(table):
            if key in APPLIED[name]:
                continue
            value = table[key]
            if key in NOT_APPLIED[name]:
                if value not in (None, "", [], {}):
                    p.notes.append(f"task.toml: {name}.{key} is read but not applied")
            else:
                p.notes.append(f"task.toml: {name}.{key} is not a Harbor field; ignored")


def _dockerfile_facts(p: _Problems, path: Path, rel: str) -> tuple[str, dict[str, str]]:
    try:
        df = dockerfile_mod.parse(path)
    except OSError as e:
        p.add(rel, "", f"cannot read: {e}")
        return "/", {}
    if not df.base_image:
        p.add(rel, "FROM", "no FROM line")
    return df.workdir, df.env


def _read_toml(p: _Problems, path: Path) -> dict[str, Any]:
    if not path.exists():
        p.add("task.toml", "", "missing")
        return {}
    try:
        return tomllib.loads(read_task_file(path))
    except tomllib.TOMLDecodeError as e:
        p.add("task.toml", "", f"not valid TOML: {e}")
    except ValueError as e:
        p.add("task.toml", "", str(e))
    return {}


def _instruction(p: _Problems, path: Path, rel: str, required: bool = True) -> str:
    if not path.is_file():
        if required:
            p.add(rel, "", "missing")
        return ""
    text = path.read_text(encoding="utf-8", errors="replace")
    if required and not text.strip():
        p.add(rel, "", "is empty")
    return text


def _network(p: _Problems, env: dict) -> tuple[bool, str]:
    allow = env.get("allow_internet", True)  # Harbor's default
    if not isinstance(allow, bool):
        p.add("task.toml", "environment.allow_internet", f"must be true or false, got {allow!r}")
        allow = False
    mode = env.get("network_mode")
    if mode is None:
        return allow, ""
    if mode not in NETWORK_MODES:
        p.add("task.toml", "environment.network_mode", f"must be one of {', '.join(NETWORK_MODES)}, got {mode!r}")
        return False, ""
    if mode == "allowlist":
        p.notes.append("task.toml: environment.network_mode = \"allowlist\" cannot be enforced; the task runs without network")
    return mode == "public", mode


def _compose_settings(c: compose_mod.ComposeEnv, env: dict, fields: dict[str, Any]) -> None:
    """The compose service's limits and `network_mode: none` where the task file sets none of its own."""
    if c.memory_mb is not None and fields.get("memory_mb") is None:
        fields["memory_mb"] = c.memory_mb
    if c.cpus is not None and fields.get("cpus") is None:
        fields["cpus"] = c.cpus
    if c.allow_internet is False and "allow_internet" not in env and "network_mode" not in env:
        fields["allow_internet"] = False


def _environment(p: _Problems, root: Path, env: dict, fields: dict[str, Any]) -> None:
    """Image or Dockerfile, from environment/Dockerfile, [environment] docker_image or a one-service compose file."""
    image = env.get("docker_image")
    if image is not None and (not isinstance(image, str) or not image.strip()):
        p.add("task.toml", "environment.docker_image", f"must be a non-empty string, got {image!r}")
        image = None
    dockerfile = root / "environment" / "Dockerfile"
    compose_path = next((root / "environment" / n for n in ("docker-compose.yaml", "docker-compose.yml")
                         if (root / "environment" / n).is_file()), None)
    has_df = dockerfile.is_file()
    compose_image = None
    if compose_path is not None:
        rel = f"environment/{compose_path.name}"
        c = compose_mod.read(compose_path, rel, "main", lambda f, m: p.add(rel, f, m))
        p.notes += c.notes
        fields["environment_env"] = {**c.env, **fields["environment_env"]}
        _compose_settings(c, env, fields)
        if c.dockerfile is not None:
            dockerfile, has_df = c.dockerfile, True
        elif c.image is not None:
            compose_image, has_df = c.image, False
    if image and has_df:
        p.add("task.toml", "environment.docker_image", "both docker_image and environment/Dockerfile are given; keep one")
    image = image or compose_image
    if not image and not has_df and compose_path is None:
        p.add("environment/Dockerfile", "", "missing, and task.toml has no environment.docker_image")
    fields["image"] = image if image else None
    fields["dockerfile"] = dockerfile if has_df and not image else None
    fields["workdir"], fields["env"] = ("/", {})
    if fields["dockerfile"]:
        rel = str(dockerfile.relative_to(root)) if dockerfile.is_relative_to(root) else str(dockerfile)
        fields["workdir"], fields["env"] = _dockerfile_facts(p, dockerfile, rel)


def _steps(p: _Problems, root: Path, data: dict, fields: dict[str, Any]) -> tuple[TaskStep, ...]:
    """The `[[steps]]` of a multi-step task, each with steps/<name>/instruction.md and a test.sh."""
    raw = data.get("steps")
    if raw is None:
        if (root / "steps").is_dir():
            p.add("task.toml", "steps", "steps/ exists but task.toml declares no [[steps]]")
        return ()
    if not isinstance(raw, list) or not raw or not all(isinstance(s, dict) for s in raw):
        p.add("task.toml", "steps", "must be one or more [[steps]] tables")
        return ()
    strategy = data.get("multi_step_reward_strategy", "mean")
    if strategy not in ("mean", "final"):
        p.add("task.toml", "multi_step_reward_strategy", f"must be \"mean\" or \"final\", got {strategy!r}")
        strategy = "mean"
    fields["step_reward"] = strategy
    steps, seen = [], set()
    for i, s in enumerate(raw):
        where = f"steps[{i}]"
        name = s.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name or ""):
            p.add("task.toml", f"{where}.name", f"must be a folder name under steps/, got {name!r}")
            continue
        if name in seen:
            p.add("task.toml", f"{where}.name", f"{name!r} is used by two steps")
        seen.add(name)
        for key in sorted(set(s) - STEP_KEYS):
            p.add("task.toml", f"{where}.{key}", "is not supported for steps; the task is refused rather than run without it")
        agent, verifier = _table(p, s, "agent"), _table(p, s, "verifier")
        for table, known in ((agent, {"timeout_sec"}), (verifier, {"timeout_sec", "env"})):
            for key in sorted(set(table) - known):
                section = "agent" if table is agent else "verifier"
                p.add("task.toml", f"{where}.{section}.{key}", "is not supported for steps")
        min_reward = s.get("min_reward")
        if min_reward is not None:
            min_reward = _number(p, "task.toml", f"{where}.min_reward", min_reward, None, positive=False)
        d = root / "steps" / name
        if not d.is_dir():
            p.add(f"steps/{name}", "", "missing (each [[steps]] entry needs its folder)")
            continue
        for entry in sorted(e.name for e in d.iterdir() if e.name not in STEP_DIR_ENTRIES):
            p.add(f"steps/{name}/{entry}", "", "is not supported in a step (only instruction.md, tests/, solution/)")
        tests = d / "tests"
        if not (tests / "test.sh").is_file() and not fields["test_script"].is_file():
            p.add(f"steps/{name}/tests/test.sh", "", "missing, and the task has no tests/test.sh to fall back on")
        solve = d / "solution" / "solve.sh"
        steps.append(TaskStep(
            name=name,
            instruction=_instruction(p, d / "instruction.md", f"steps/{name}/instruction.md"),
            tests_dir=tests if tests.is_dir() else None,
            agent_timeout_s=_number(p, "task.toml", f"{where}.agent.timeout_sec", agent.get("timeout_sec"),
                                    fields["agent_timeout_s"]),
            verifier_timeout_s=_number(p, "task.toml", f"{where}.verifier.timeout_sec", verifier.get("timeout_sec"),
                                       fields["verifier_timeout_s"]),
            solution=solve if solve.is_file() else None,
            min_reward=min_reward,
            verifier_env=_env_table(p, "task.toml", f"{where}.verifier.env", verifier.get("env")),
        ))
    if (root / "steps").is_dir():
        for extra in sorted(e.name for e in (root / "steps").iterdir() if e.is_dir() and e.name not in seen):
            p.add(f"steps/{extra}", "", "is not declared in task.toml's [[steps]]")
    return tuple(steps)


def _load_harbor(root: Path, p: _Problems) -> dict[str, Any]:
    fields: dict[str, Any] = {"layout": "harbor"}
    data = _read_toml(p, root / "task.toml")
    meta, verifier = _table(p, data, "metadata"), _table(p, data, "verifier")
    agent, env = _table(p, data, "agent"), _table(p, data, "environment")
    solution = _table(p, data, "solution")
    _notes(p, data, {"environment": env, "verifier": verifier, "agent": agent, "solution": solution})
    fields["metadata"] = meta
    fields["agent_timeout_s"] = _number(p, "task.toml", "agent.timeout_sec", agent.get("timeout_sec"), None)
    fields["verifier_timeout_s"] = _number(p, "task.toml", "verifier.timeout_sec", verifier.get("timeout_sec"), DEFAULT_VERIFIER_TIMEOUT_S)
    fields["build_timeout_s"] = _number(p, "task.toml", "environment.build_timeout_sec", env.get("build_timeout_sec"), DEFAULT_BUILD_TIMEOUT_S)
    fields["cpus"] = _number(p, "task.toml", "environment.cpus", env.get("cpus"), None)
    fields["memory_mb"] = _size_mb(p, env, "memory")
    fields["storage_mb"] = _size_mb(p, env, "storage")
    fields["gpus"] = _count(p, "environment.gpus", env.get("gpus"))
    if fields["gpus"]:
        p.notes.append(f"task.toml: environment.gpus = {fields['gpus']} is read but not applied; sandboxes have no GPU")
    fields["allow_internet"], fields["network_mode"] = _network(p, env)
    fields["verifier_env"] = _env_table(p, "task.toml", "verifier.env", verifier.get("env"))
    fields["environment_env"] = _env_table(p, "task.toml", "environment.env", env.get("env"))
    fields["solution_env"] = _env_table(p, "task.toml", "solution.env", solution.get("env"))
    _environment(p, root, env, fields)

    fields["tests_dir"] = root / "tests"
    fields["test_script"] = root / "tests" / "test.sh"
    fields["steps"] = _steps(p, root, data, fields)
    multi = bool(fields["steps"]) or "steps" in data
    # A multi-step task's own instruction.md and tests/test.sh are optional: each step brings its own.
    fields["instruction"] = _instruction(p, root / "instruction.md", "instruction.md", required=not multi)
    if not multi and not fields["test_script"].is_file():
        p.add("tests/test.sh", "", "missing")
    solve = root / "solution" / "solve.sh"
    fields["solution"] = solve if solve.is_file() else None
    return fields


def _load_terminal_bench(root: Path, p: _Problems) -> dict[str, Any]:
    fields: dict[str, Any] = {"layout": "terminal-bench"}
    data: dict[str, Any] = {}
    problems = len(p.items)
    try:
        loaded = yaml.safe_load(read_task_file(root / "task.yaml"))
        if isinstance(loaded, dict):
            data = loaded
        else:
            p.add("task.yaml", "", "is empty" if loaded is None else f"must be a mapping, got {type(loaded).__name__}")
    except ValueError as e:
        p.add("task.yaml", "", str(e))
    except yaml.YAMLError as e:
        p.add("task.yaml", "", f"not valid YAML: {e}")
    instruction = data.get("instruction")
    where = "instruction"
    if instruction is None and data.get("descriptions") is not None:  # the oldest TB layout
        where = "descriptions[0].description"
        first = data["descriptions"][0] if isinstance(data["descriptions"], list) and data["descriptions"] else None
        instruction = first.get("description") if isinstance(first, dict) else None
    if len(p.items) == problems and (not isinstance(instruction, str) or not instruction.strip()):  # else: said
        p.add("task.yaml", where, "missing or empty" if instruction in (None, "") or isinstance(instruction, str)
              else f"must be text, got {type(instruction).__name__}")
    if not isinstance(instruction, str):
        instruction = ""
    fields["instruction"] = instruction
    fields["agent_timeout_s"] = _number(p, "task.yaml", "max_agent_timeout_sec", data.get("max_agent_timeout_sec"), TB1_AGENT_TIMEOUT_S)
    fields["verifier_timeout_s"] = _number(p, "task.yaml", "max_test_timeout_sec", data.get("max_test_timeout_sec"), TB1_TEST_TIMEOUT_S)
    fields["build_timeout_s"] = DEFAULT_BUILD_TIMEOUT_S
    fields["cpus"], fields["memory_mb"] = None, None
    fields["allow_internet"] = True  # TB1 containers had network; the run still decides
    fields["metadata"] = {k: v for k, v in data.items() if k not in ("instruction", "descriptions")}
    if data.get("run_tests_in_same_shell"):
        p.notes.append("task.yaml: run_tests_in_same_shell is read but not applied; tests run in a fresh shell")
    fields["verifier_env"] = {}
    fields["environment_env"] = {}
    fields["image"], fields["dockerfile"] = None, None
    compose_path = root / "docker-compose.yaml"
    if compose_path.is_file():  # else TB1's default: one `client` service built from ./Dockerfile
        c = compose_mod.read(compose_path, "docker-compose.yaml", "client", lambda f, m: p.add("docker-compose.yaml", f, m))
        p.notes += c.notes
        fields["environment_env"] = c.env
        _compose_settings(c, {}, fields)
        fields["dockerfile"], fields["image"] = c.dockerfile, c.image
    elif (root / "Dockerfile").is_file():
        fields["dockerfile"] = root / "Dockerfile"
    else:
        p.add("Dockerfile", "", "missing")
    fields["workdir"], fields["env"] = "/", {}
    if fields["dockerfile"]:
        fields["workdir"], fields["env"] = _dockerfile_facts(p, fields["dockerfile"], fields["dockerfile"].name)
    fields["tests_dir"] = root / "tests"
    fields["test_script"] = root / "run-tests.sh"
    if not fields["test_script"].is_file():
        fields["test_script"] = TB1_DEFAULT_RUN_TESTS
        if not (root / "tests" / "test_outputs.py").is_file():
            p.add("run-tests.sh", "", "missing, and there is no tests/test_outputs.py for the default runner")
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
    p = _Problems(root.name, display_path(root))
    if not root.is_dir():
        raise TaskInvalid([TaskProblem(root.name, "", "", f"not a directory: {path}", p.path)])
    if (root / "task.toml").is_file() or (root / "instruction.md").is_file():
        fields = _load_harbor(root, p)
    elif (root / "task.yaml").is_file():
        fields = _load_terminal_bench(root, p)
    else:
        p.add("task.toml", "", "missing (neither a Harbor task.toml nor a Terminal-Bench task.yaml)")
        raise TaskInvalid(p.items)
    if p.items:
        raise TaskInvalid(p.items)
    return Task(id=root.name, path=root, notes=tuple(dict.fromkeys(p.notes)), **fields)


def is_task_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in ("task.toml", "task.yaml", "instruction.md"))


def find_tasks(*paths: str | Path) -> list[Path]:
    """Task directories named directly or found at any depth below the given paths, sorted, unique.

    A task directory's own folders (tests/, environment/, steps/...) are not searched: nothing in
    them is a task. Hidden folders are skipped, and symbolic links to folders are not followed.
    """
    found: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if is_task_dir(path):
            found.add(path.resolve())
            continue
        if not path.is_dir():
            continue
        for dirpath, dirnames, _ in os.walk(path):
            here = Path(dirpath)
            keep = []
            for name in sorted(dirnames):
                child = here / name
                if name.startswith("."):
                    continue
                if is_task_dir(child):
                    found.add(child.resolve())
                else:
                    keep.append(name)
            dirnames[:] = keep
    return sorted(found)


def without_tasks(*paths: str | Path) -> list[str]:
    """The given paths that exist but hold no task (a task directory named with a typo inside, a
    folder of something else): a caller names them instead of running on the others alone."""
    return [str(p) for p in paths if Path(p).exists() and not find_tasks(p)]
