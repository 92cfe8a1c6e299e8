"""The task formats beyond the plain layouts: compose files, multi-step tasks, TB1 defaults, Harbor's
current field names, env tables, nested datasets and problem lines that name the task's path."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mirl.tasks import TaskInvalid, find_tasks, load_task, validate_task
from mirl.tasks.dockerfile import parse
from mirl.tasks.envvars import MissingVariable, resolve
from mirl.tasks.loader import TB1_DEFAULT_RUN_TESTS
from tests.conftest import write_task
from tests.tasks.test_loader import TERMIGEN, write_harbor, write_tb1

needs_termigen = pytest.mark.skipif(not TERMIGEN.is_dir(), reason="external TermiGen tasks not present (../shared)")


def termigen_copy(tmp_path: Path, name: str = "aide_file_integrity_monitoring_hard") -> Path:
    """A real Harbor task nobody here wrote, copied so that one file of it can be changed."""
    dst = tmp_path / name
    shutil.copytree(TERMIGEN / name, dst)
    return dst


def problems_of(root: Path) -> list[tuple[str, str, str]]:
    return [(p.file, p.field, p.message) for p in validate_task(root)]


# --- FROM --platform= ---------------------------------------------------------------------------

def test_from_platform_flag_is_not_the_image(tmp_path):
    df = tmp_path / "Dockerfile"
    df.write_text("ARG BASE=python:3.11-slim\nFROM --platform=linux/amd64 $BASE AS build\nWORKDIR /b\n"
                  "FROM --platform=$BUILDPLATFORM debian:bookworm\nWORKDIR /app\n")
    assert parse(df).base_image == "debian:bookworm"


@needs_termigen
def test_real_task_with_from_platform_loads_its_image(tmp_path):
    root = termigen_copy(tmp_path)
    df = root / "environment" / "Dockerfile"
    original = parse(df).base_image
    df.write_text(df.read_text().replace("FROM ", "FROM --platform=linux/amd64 ", 1))
    task = load_task(root)
    assert parse(task.dockerfile).base_image == original == "ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624"


# --- Terminal-Bench 1 defaults -------------------------------------------------------------------

def test_tb1_without_run_tests_uses_the_default_runner(tmp_path):
    root = write_tb1(tmp_path / "no-runner")
    (root / "run-tests.sh").unlink()
    task = load_task(root)
    assert task.test_script == TB1_DEFAULT_RUN_TESTS and task.test_script.is_file()
    assert "$TEST_DIR/test_outputs.py" in task.test_script.read_text()


def test_tb1_without_run_tests_or_test_outputs_is_refused(tmp_path):
    root = write_tb1(tmp_path / "nothing-to-run")
    (root / "run-tests.sh").unlink()
    (root / "tests" / "test_outputs.py").unlink()
    assert ("run-tests.sh", "", "missing, and there is no tests/test_outputs.py for the default runner") in problems_of(root)


def test_tb1_timeouts_default_to_terminal_bench_values(tmp_path):
    task = load_task(write_tb1(tmp_path / "defaults", "instruction: say hi\n"))
    assert (task.agent_timeout_s, task.verifier_timeout_s) == (360.0, 60.0)


TB1_COMPOSE = """services:
  client:
    build:
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
      - MODE=strict
    volumes:
      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
"""


def test_tb1_single_client_compose_is_the_dockerfile_environment(tmp_path):
    root = write_tb1(tmp_path / "compose-client")
    (root / "docker-compose.yaml").write_text(TB1_COMPOSE)
    task = load_task(root)
    assert task.dockerfile == root / "Dockerfile" and task.workdir == "/app"
    assert task.environment_env == {"TEST_DIR": "/tests", "MODE": "strict"}


def test_tb1_compose_with_a_second_service_is_refused_naming_it(tmp_path):
    root = write_tb1(tmp_path / "compose-db")
    (root / "docker-compose.yaml").write_text(TB1_COMPOSE + "  db:\n    image: postgres:16\n")
    problems = validate_task(root)
    assert [(p.file, p.field) for p in problems] == [("docker-compose.yaml", "services")]
    assert "defines db besides `client`" in problems[0].message


# --- Harbor docker-compose environments ----------------------------------------------------------

HARBOR_COMPOSE = """services:
  main:
    build:
      context: .
      dockerfile: Dockerfile
    environment:
      API_URL: http://localhost:8080
"""


def test_harbor_compose_with_only_main_loads_as_its_dockerfile(tmp_path):
    root = write_harbor(tmp_path / "compose-main", **{"environment/docker-compose.yaml": HARBOR_COMPOSE})
    task = load_task(root)
    assert task.dockerfile == root / "environment" / "Dockerfile"
    assert task.environment_env == {"API_URL": "http://localhost:8080"}
    assert task.env == {"GREETING": "hello", "PATH_EXTRA": "/opt/bin"}  # the Dockerfile's ENV is still read


def test_harbor_compose_limits_and_no_network_become_the_tasks_settings(tmp_path):
    """The limits and `network_mode: none` are the task's own where task.toml sets none; what the
    sandbox does not apply (a command that starts a service, an entrypoint, a data volume) is said."""
    compose = HARBOR_COMPOSE + """    network_mode: none
    command: [sh, -c, "service postgresql start && sleep infinity"]
    entrypoint: /docker-entrypoint.sh
    volumes:
      - ./data:/srv/data
      - ${T_BENCH_TASK_LOGS_PATH}:/logs
    deploy:
      resources:
        limits: {memory: 1.5G, cpus: "0.5"}
"""
    bare_toml = "version = \"1.0\"\n[verifier]\ntimeout_sec = 30.0\n"
    root = write_harbor(tmp_path / "compose-limits", **{"environment/docker-compose.yaml": compose,
                                                         "task.toml": bare_toml})
    task = load_task(root)
    assert (task.memory_mb, task.cpus, task.allow_internet) == (1536, 0.5, False)
    notes = "\n".join(task.notes)
    assert "services.main.command is not applied" in notes and "services.main.entrypoint is not applied" in notes
    assert "./data:/srv/data" in notes and "/logs" not in notes.replace("./data:/srv/data", "")
    # a keep-alive alone is what the sandbox does anyway: nothing to say
    keep = HARBOR_COMPOSE + "    command: [sh, -c, sleep infinity]\n"
    root = write_harbor(tmp_path / "compose-keep", **{"environment/docker-compose.yaml": keep, "task.toml": bare_toml})
    assert not [n for n in load_task(root).notes if "command" in n]
    # an interpolated or unreadable limit is said, not a reason to refuse the task; 0 is Docker's "no limit"
    odd = HARBOR_COMPOSE + "    mem_limit: ${MEM_LIMIT:-2g}\n    cpus: 0\n"
    root = write_harbor(tmp_path / "compose-odd", **{"environment/docker-compose.yaml": odd, "task.toml": bare_toml})
    task = load_task(root)
    assert (task.memory_mb, task.cpus) == (None, None) and any("MEM_LIMIT" in n for n in task.notes)
    # the task file's own settings win
    root = write_harbor(tmp_path / "compose-toml", **{"environment/docker-compose.yaml": compose})
    task = load_task(root)
    assert (task.memory_mb, task.cpus) == (512, 2)


def test_harbor_compose_image_only_main(tmp_path):
    root = write_harbor(tmp_path / "compose-image", **{
        "environment/Dockerfile": None,
        "environment/docker-compose.yaml": "services:\n  main:\n    image: python:3.12-slim\n"})
    task = load_task(root)
    assert (task.image, task.dockerfile) == ("python:3.12-slim", None)


def test_harbor_compose_with_sidecars_is_refused_at_load_naming_them(tmp_path):
    compose = HARBOR_COMPOSE + "  redis:\n    image: redis:7\n  db:\n    image: postgres:16\n"
    root = write_harbor(tmp_path / "compose-sidecars", **{"environment/docker-compose.yaml": compose})
    with pytest.raises(TaskInvalid) as err:
        load_task(root)
    [problem] = err.value.problems
    assert (problem.file, problem.field) == ("environment/docker-compose.yaml", "services")
    assert "defines db, redis besides `main`" in problem.message
    assert str(root) in str(err.value) or os.path.relpath(root) in str(err.value)


def test_harbor_compose_without_main_is_refused(tmp_path):
    root = write_harbor(tmp_path / "compose-nomain", **{
        "environment/docker-compose.yaml": "services:\n  app:\n    build: .\n"})
    messages = [m for f, _, m in problems_of(root) if f == "environment/docker-compose.yaml"]
    assert "has no service `main` (the container the agent works in)" in messages


# --- multi-step Harbor tasks -------------------------------------------------------------------------

MULTI_TOML = """version = "1.0"
multi_step_reward_strategy = "mean"
[verifier]
timeout_sec = 40.0
[verifier.env]
SHARED = "task"
[agent]
timeout_sec = 100.0
[[steps]]
name = "create"
min_reward = 1.0
[steps.agent]
timeout_sec = 30.0
[[steps]]
name = "append"
[steps.verifier]
timeout_sec = 20.0
env = { STEP = "append" }
"""


def write_multi_step(root: Path, toml: str = MULTI_TOML) -> Path:
    """Two steps: create /app/log.txt with `one`, then append `two`; each step's test checks its part."""
    write_task(root, toml=toml, instruction="", test_sh="#!/bin/bash\necho fallback\n")
    (root / "instruction.md").unlink()
    steps = {
        "create": ("Create /app/log.txt holding the line `one`.\n", "echo one > /app/log.txt\n",
                   "[ \"$(cat /app/log.txt)\" = one ]"),
        "append": ("Append the line `two` to /app/log.txt.\n", "echo two >> /app/log.txt\n",
                   "[ \"$(tr '\\n' ' ' < /app/log.txt)\" = 'one two ' ]"),
    }
    for name, (instruction, solve, check) in steps.items():
        d = root / "steps" / name
        (d / "tests").mkdir(parents=True)
        (d / "solution").mkdir()
        (d / "instruction.md").write_text(instruction)
        (d / "solution" / "solve.sh").write_text(solve)
        (d / "tests" / "test.sh").write_text(
            f"#!/bin/bash\nif {check}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
    return root


def test_multi_step_task_loads_each_steps_instruction_tests_and_limits(tmp_path):
    root = write_multi_step(tmp_path / "two-steps")
    task = load_task(root)
    assert [s.name for s in task.steps] == ["create", "append"]
    create, append = task.steps
    assert create.instruction.startswith("Create /app/log.txt") and append.instruction.startswith("Append")
    assert create.tests_dir == root / "steps" / "create" / "tests"
    assert create.solution == root / "steps" / "create" / "solution" / "solve.sh"
    assert (create.agent_timeout_s, create.verifier_timeout_s, create.min_reward) == (30.0, 40.0, 1.0)
    assert (append.agent_timeout_s, append.verifier_timeout_s, append.min_reward) == (100.0, 20.0, None)
    assert append.verifier_env == {"STEP": "append"} and task.verifier_env == {"SHARED": "task"}
    assert task.step_reward == "mean" and task.instruction == ""


def test_multi_step_refuses_what_it_cannot_run_naming_it(tmp_path):
    toml = MULTI_TOML.replace('name = "append"\n', 'name = "append"\nhealthcheck = "true"\n')
    root = write_multi_step(tmp_path / "unsupported", toml)
    (root / "steps" / "create" / "setup.sh").write_text("true\n")
    (root / "steps" / "stray").mkdir()
    found = problems_of(root)
    assert ("task.toml", "steps[1].healthcheck",
            "is not supported for steps; the task is refused rather than run without it") in found
    assert ("steps/create/setup.sh", "", "is not supported in a step (only instruction.md, tests/, solution/)") in found
    assert ("steps/stray", "", "is not declared in task.toml's [[steps]]") in found


def test_multi_step_needs_each_steps_folder_and_instruction(tmp_path):
    root = write_multi_step(tmp_path / "broken-steps")
    shutil.rmtree(root / "steps" / "append")
    (root / "steps" / "create" / "instruction.md").unlink()
    found = problems_of(root)
    assert ("steps/append", "", "missing (each [[steps]] entry needs its folder)") in found
    assert ("steps/create/instruction.md", "", "missing") in found


def test_steps_folder_without_declared_steps_is_named(tmp_path):
    root = write_harbor(tmp_path / "undeclared")
    (root / "steps" / "one").mkdir(parents=True)
    assert ("task.toml", "steps", "steps/ exists but task.toml declares no [[steps]]") in problems_of(root)


# --- Harbor's current field names and defaults --------------------------------------------------------

def test_unset_resources_and_agent_timeout_stay_unset(tmp_path):
    root = write_harbor(tmp_path / "bare", **{"task.toml": 'version = "1.0"\n'})
    task = load_task(root)
    assert (task.cpus, task.memory_mb, task.storage_mb, task.gpus) == (None, None, None, None)
    assert task.agent_timeout_s is None  # no limit
    assert (task.verifier_timeout_s, task.build_timeout_s) == (600.0, 600.0)
    assert (task.allow_internet, task.network_mode) == (True, "")  # Harbor's allow_internet default


def test_current_harbor_fields_are_read(tmp_path):
    toml = ('[environment]\ncpus = 3\nmemory_mb = 4096\nstorage_mb = 20480\ngpus = 1\n'
            'allow_internet = true\nnetwork_mode = "no-network"\n')
    task = load_task(write_harbor(tmp_path / "current", **{"task.toml": toml}))
    assert (task.cpus, task.memory_mb, task.storage_mb, task.gpus) == (3.0, 4096, 20480, 1)
    assert (task.allow_internet, task.network_mode) == (False, "no-network")  # network_mode wins
    assert "task.toml: environment.gpus = 1 is read but not applied; sandboxes have no GPU" in task.notes


def test_deprecated_storage_and_public_network_mode(tmp_path):
    toml = '[environment]\nstorage = "5G"\nallow_internet = false\nnetwork_mode = "public"\n'
    task = load_task(write_harbor(tmp_path / "old", **{"task.toml": toml}))
    assert (task.storage_mb, task.allow_internet, task.network_mode) == (5120, True, "public")


def test_allowlist_network_mode_is_noted_and_closed(tmp_path):
    toml = '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n'
    task = load_task(write_harbor(tmp_path / "allow", **{"task.toml": toml}))
    assert task.allow_internet is False
    assert any("allowlist" in n for n in task.notes) and "task.toml: environment.allowed_hosts is read but not applied" in task.notes


@pytest.mark.parametrize("toml, field, fragment", [
    ('[environment]\nnetwork_mode = "bridge"\n', "environment.network_mode", "public, no-network, allowlist"),
    ('[environment]\ngpus = -1\n', "environment.gpus", "whole number"),
    ('[environment]\nstorage_mb = 0\n', "environment.storage_mb", "positive"),
    ('[environment.env]\nA = ["x"]\n', "environment.env.A", "must be a string"),
    ('[verifier]\nenv = "A=1"\n', "verifier.env", "table"),
])
def test_bad_current_fields_are_named(tmp_path, toml, field, fragment):
    found = problems_of(write_harbor(tmp_path / "bad", **{"task.toml": toml}))
    assert any(f == "task.toml" and fd == field and fragment in m for f, fd, m in found), found


def test_fields_read_but_not_applied_are_noted_not_dropped(tmp_path):
    toml = ('version = "1.0"\ncolour = "blue"\n[agent]\nuser = "agent"\n[environment]\nworkdir = "/srv"\n'
            'mystery = 1\n[environment.healthcheck]\ncommand = "true"\n')
    task = load_task(write_harbor(tmp_path / "noted", **{"task.toml": toml}))
    assert set(task.notes) == {
        "task.toml: colour is not a Harbor field; ignored",
        "task.toml: agent.user is read but not applied",
        "task.toml: environment.workdir is read but not applied",
        "task.toml: environment.healthcheck is read but not applied",
        "task.toml: environment.mystery is not a Harbor field; ignored",
    }


@needs_termigen
def test_termigen_tasks_read_current_fields_without_notes():
    tasks = [load_task(p) for p in find_tasks(TERMIGEN)]
    assert {(t.cpus, t.memory_mb, t.storage_mb, t.gpus) for t in tasks} == {(1.0, 2048, 10240, 0)}
    assert all(t.allow_internet and t.notes == () for t in tasks)


# --- env tables ----------------------------------------------------------------------------------

def test_env_tables_are_kept_as_templates(tmp_path):
    toml = ('[environment.env]\nTOKEN = "${HOST_TOKEN}"\nLEVEL = "${LEVEL:-3}"\nPLAIN = "x"\n'
            '[verifier.env]\nCHECK = "${HOST_TOKEN}-v"\n[solution.env]\nHELP = "yes"\n')
    task = load_task(write_harbor(tmp_path / "env", **{"task.toml": toml}))
    assert task.environment_env == {"TOKEN": "${HOST_TOKEN}", "LEVEL": "${LEVEL:-3}", "PLAIN": "x"}
    assert task.verifier_env == {"CHECK": "${HOST_TOKEN}-v"} and task.solution_env == {"HELP": "yes"}


def test_env_templates_resolve_from_the_host():
    templates = {"TOKEN": "${HOST_TOKEN}", "LEVEL": "${LEVEL:-3}", "PLAIN": "a$b", "BOTH": "${A}/${B:-d}"}
    assert resolve(templates, {"HOST_TOKEN": "t0k", "A": "x"}) == {"TOKEN": "t0k", "LEVEL": "3", "PLAIN": "a$b",
                                                                   "BOTH": "x/d"}
    with pytest.raises(MissingVariable, match=r"\[environment\] env needs the host variable\(s\) A, HOST_TOKEN"):
        resolve(templates, {}, what="[environment] env")


# --- recursive discovery and problem lines that name the path -------------------------------------------

def test_find_tasks_searches_nested_datasets_but_not_inside_tasks(tmp_path):
    write_harbor(tmp_path / "suite" / "group-a" / "easy" / "t1")  # two levels below the dataset folder
    write_tb1(tmp_path / "suite" / "group-b" / "t2")
    write_harbor(tmp_path / "suite" / "t3")
    # a task's own folders hold nothing that is a task, even when a file there looks like one
    (tmp_path / "suite" / "t3" / "tests" / "fixture").mkdir(parents=True)
    (tmp_path / "suite" / "t3" / "tests" / "fixture" / "task.toml").write_text("")
    (tmp_path / "suite" / ".cache" / "t4").mkdir(parents=True)
    (tmp_path / "suite" / ".cache" / "t4" / "task.toml").write_text("")
    found = find_tasks(tmp_path / "suite")
    assert [p.relative_to(tmp_path / "suite").as_posix() for p in found] == ["group-a/easy/t1", "group-b/t2", "t3"]


def test_two_tasks_of_one_name_are_told_apart(tmp_path, monkeypatch):
    for dataset in ("alpha", "beta"):
        write_harbor(tmp_path / dataset / "hello-world", **{"tests/test.sh": None})
    monkeypatch.chdir(tmp_path)
    lines = sorted(str(p) for path in find_tasks(tmp_path) for p in validate_task(path))
    assert lines == ["alpha/hello-world: tests/test.sh: missing", "beta/hello-world: tests/test.sh: missing"]


def test_problem_path_is_absolute_outside_the_working_directory(tmp_path, monkeypatch):
    root = write_harbor(tmp_path / "far" / "hello-world", **{"instruction.md": None})
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    [problem] = validate_task(root)
    assert (problem.task, problem.path) == ("hello-world", str(root))
    assert str(problem) == f"{root}: instruction.md: missing"


def test_cli_validate_names_paths_and_prints_notes(tmp_path, monkeypatch, capsys):
    from mirl.cli import main

    write_harbor(tmp_path / "a" / "hello-world", **{"tests/test.sh": None})
    write_harbor(tmp_path / "b" / "hello-world", **{"task.toml": '[agent]\nuser = "me"\n'})
    monkeypatch.chdir(tmp_path)
    assert main(["tasks", "validate", "."]) == 1
    captured = capsys.readouterr()
    assert "a/hello-world: tests/test.sh: missing" in captured.err
    assert "b/hello-world: note: task.toml: agent.user is read but not applied" in captured.err
    assert "1 of 2 tasks valid" in captured.out
