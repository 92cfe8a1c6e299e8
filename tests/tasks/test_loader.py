"""The task loader: both layouts, every field, and precise errors for a corpus of broken tasks."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mirl.tasks import TaskInvalid, find_tasks, load_task, validate_task

REPO = Path(__file__).resolve().parents[2]
TERMIGEN = Path(os.environ.get("MIRL_TERMIGEN") or REPO.parent / "shared" / "external" / "termigen")

TASK_TOML = """version = "1.0"
[metadata]
difficulty = "easy"
[verifier]
timeout_sec = 30.0
[agent]
timeout_sec = 300.0
[environment]
cpus = 2
memory_mb = 512
allow_internet = false
"""
DOCKERFILE = "FROM mirl-base\nENV GREETING=hello PATH_EXTRA=/opt/bin\nWORKDIR /app\nCOPY data.txt /app/data.txt\n"


def write_harbor(root: Path, **override: str | None) -> Path:
    files = {
        "instruction.md": "Count the lines of /app/data.txt.\n",
        "task.toml": TASK_TOML,
        "environment/Dockerfile": DOCKERFILE,
        "environment/data.txt": "a\nb\n",
        "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        "solution/solve.sh": "wc -l < data.txt > count.txt\n",
    }
    files.update(override)
    for rel, text in files.items():
        if text is None:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def write_tb1(root: Path, task_yaml: str | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "task.yaml").write_text(task_yaml if task_yaml is not None else (
        "instruction: |\n  Create /app/hello.txt containing hello.\n"
        "difficulty: easy\ncategory: file-operations\ntags: [files]\n"
        "max_agent_timeout_sec: 180\nmax_test_timeout_sec: 30\nparser_name: pytest\n"))
    (root / "Dockerfile").write_text("FROM mirl-base\nWORKDIR /app\n")
    (root / "run-tests.sh").write_text("#!/bin/bash\npython3 -m pytest $TEST_DIR/test_outputs.py\n")
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "test_outputs.py").write_text("def test_x():\n    assert open('/app/hello.txt').read().strip() == 'hello'\n")
    (root / "solution.sh").write_text("echo hello > /app/hello.txt\n")
    return root


def test_harbor_fields(tmp_path):
    task = load_task(write_harbor(tmp_path / "count-lines"))
    assert task.id == "count-lines" and task.layout == "harbor"
    assert task.instruction.startswith("Count the lines")
    assert (task.agent_timeout_s, task.verifier_timeout_s) == (300.0, 30.0)
    assert (task.cpus, task.memory_mb, task.allow_internet) == (2.0, 512, False)
    assert task.workdir == "/app" and task.env == {"GREETING": "hello", "PATH_EXTRA": "/opt/bin"}
    assert task.image is None and task.dockerfile.name == "Dockerfile"
    assert task.test_script.name == "test.sh" and task.solution.name == "solve.sh"
    assert task.difficulty == "easy"


def test_harbor_image_instead_of_dockerfile(tmp_path):
    root = write_harbor(tmp_path / "t", **{"environment/Dockerfile": None})
    (root / "task.toml").write_text(TASK_TOML + 'docker_image = "python:3.11-slim"\n')
    task = load_task(root)
    assert task.image == "python:3.11-slim" and task.dockerfile is None and task.workdir == "/"


def test_memory_as_string(tmp_path):
    root = write_harbor(tmp_path / "t", **{"task.toml": TASK_TOML.replace("memory_mb = 512", 'memory = "2G"')})
    assert load_task(root).memory_mb == 2048


def test_terminal_bench_layout(tmp_path):
    task = load_task(write_tb1(tmp_path / "hello-tb"))
    assert task.layout == "terminal-bench"
    assert task.instruction.startswith("Create /app/hello.txt")
    assert (task.agent_timeout_s, task.verifier_timeout_s) == (180.0, 30.0)
    assert task.test_script.name == "run-tests.sh" and task.solution.name == "solution.sh"
    assert task.workdir == "/app" and task.metadata["parser_name"] == "pytest"


BROKEN = {
    # name: (files to override, expected (file, field, message fragment))
    "missing-instruction": ({"instruction.md": None}, ("instruction.md", "", "missing")),
    "empty-instruction": ({"instruction.md": "  \n"}, ("instruction.md", "", "empty")),
    "missing-test-sh": ({"tests/test.sh": None}, ("tests/test.sh", "", "missing")),
    "unparsable-toml": ({"task.toml": "[agent\ntimeout_sec = 1\n"}, ("task.toml", "", "not valid TOML")),
    "negative-timeout": ({"task.toml": TASK_TOML.replace("timeout_sec = 300.0", "timeout_sec = -5")},
                         ("task.toml", "agent.timeout_sec", "positive")),
    "non-numeric-timeout": ({"task.toml": TASK_TOML.replace("timeout_sec = 30.0", 'timeout_sec = "soon"')},
                            ("task.toml", "verifier.timeout_sec", "must be a number")),
    "bad-memory": ({"task.toml": TASK_TOML.replace("memory_mb = 512", 'memory = "lots"')},
                   ("task.toml", "environment.memory", "2G")),
    "fractional-memory": ({"task.toml": TASK_TOML.replace("memory_mb = 512", "memory_mb = 0.5")},
                          ("task.toml", "environment.memory_mb", "whole number")),
    "zero-memory": ({"task.toml": TASK_TOML.replace("memory_mb = 512", "memory_mb = 0")},
                    ("task.toml", "environment.memory_mb", "positive")),
    "zero-memory-string": ({"task.toml": TASK_TOML.replace("memory_mb = 512", 'memory = "0G"')},
                           ("task.toml", "environment.memory", "positive")),
    "fractional-storage": ({"task.toml": TASK_TOML.replace("memory_mb = 512", "storage_mb = 10.5")},
                           ("task.toml", "environment.storage_mb", "whole number")),
    "zero-cpus": ({"task.toml": TASK_TOML.replace("cpus = 2", "cpus = 0")}, ("task.toml", "environment.cpus", "positive")),
    "bad-allow-internet": ({"task.toml": TASK_TOML.replace("allow_internet = false", 'allow_internet = "no"')},
                           ("task.toml", "environment.allow_internet", "true or false")),
    "both-dockerfile-and-image": ({"task.toml": TASK_TOML + 'docker_image = "x:1"\n'},
                                  ("task.toml", "environment.docker_image", "both")),
    "neither-dockerfile-nor-image": ({"environment/Dockerfile": None}, ("environment/Dockerfile", "", "missing")),
    "dockerfile-without-from": ({"environment/Dockerfile": "WORKDIR /app\n"}, ("environment/Dockerfile", "FROM", "no FROM")),
    "environment-not-a-table": ({"task.toml": 'environment = "docker"\n'}, ("task.toml", "environment", "table")),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_task_is_named_precisely(tmp_path, name):
    override, (file, field, fragment) = BROKEN[name]
    root = write_harbor(tmp_path / name, **override)
    problems = validate_task(root)
    assert problems, f"{name} should be invalid"
    matching = [p for p in problems if p.file == file and p.field == field and fragment in p.message]
    assert matching, f"expected {file}:{field} ~ {fragment!r}, got {[str(p) for p in problems]}"
    assert all(p.task == name for p in problems)
    with pytest.raises(TaskInvalid) as err:
        load_task(root)
    assert name in str(err.value) and file in str(err.value)


def test_all_problems_reported_at_once(tmp_path):
    root = write_harbor(tmp_path / "many", **{"instruction.md": None, "tests/test.sh": None,
                                             "task.toml": TASK_TOML.replace("cpus = 2", "cpus = 0")})
    files = {(p.file, p.field) for p in validate_task(root)}
    assert {("instruction.md", ""), ("tests/test.sh", ""), ("task.toml", "environment.cpus")} <= files


@pytest.mark.parametrize("yaml_text,field", [
    ("difficulty: easy\n", "instruction"),
    ("instruction: hi\nmax_agent_timeout_sec: -1\n", "max_agent_timeout_sec"),
    ("instruction: [unclosed\n", ""),
])
def test_broken_terminal_bench(tmp_path, yaml_text, field):
    problems = validate_task(write_tb1(tmp_path / "tb", yaml_text))
    assert any(p.file == "task.yaml" and p.field == field for p in problems), [str(p) for p in problems]


BINARY = b"\x00\x98\xff\xfe\x80 not text\n"


@pytest.mark.parametrize("rel, where", [
    ("task.toml", "harbor"),
    ("environment/docker-compose.yaml", "harbor"),
    ("task.yaml", "tb1"),
])
def test_a_task_file_that_is_not_text_is_a_problem_not_a_traceback(tmp_path, rel, where):
    """Non-UTF-8 bytes in task.toml, task.yaml or a compose file raised UnicodeDecodeError out of the loader."""
    root = write_harbor(tmp_path / "t") if where == "harbor" else write_tb1(tmp_path / "t")
    (root / rel).write_bytes(BINARY)
    problems = validate_task(root)
    assert any(p.file == rel and "not a text file" in p.message for p in problems), [str(p) for p in problems]


def test_a_task_file_that_is_a_directory_is_named_so(tmp_path):
    root = write_harbor(tmp_path / "t", **{"task.toml": None})
    (root / "task.toml").mkdir()
    assert [(p.file, p.message) for p in validate_task(root)] == [("task.toml", "a directory, not a file")]


@pytest.mark.parametrize("yaml_text, field, fragment", [
    ("descriptions:\n  - 3\n", "descriptions[0].description", "missing"),
    ("descriptions: [{description: 5}]\n", "descriptions[0].description", "must be text, got int"),
    ("descriptions: oops\n", "descriptions[0].description", "missing"),
    ("instruction: [a, b]\n", "instruction", "must be text, got list"),
    ("", "", "is empty"),
    ("- a\n", "", "must be a mapping, got list"),
])
def test_broken_terminal_bench_fields_are_problems_not_tracebacks(tmp_path, yaml_text, field, fragment):
    """`descriptions: [3]` (the oldest TB layout, malformed) raised AttributeError out of the loader."""
    problems = validate_task(write_tb1(tmp_path / "tb", yaml_text))
    assert [(p.file, p.field) for p in problems] == [("task.yaml", field)], [str(p) for p in problems]
    assert fragment in problems[0].message


def test_not_a_task(tmp_path):
    (tmp_path / "empty").mkdir()
    problems = validate_task(tmp_path / "empty")
    assert problems and "neither" in problems[0].message


def test_find_tasks_one_level(tmp_path):
    write_harbor(tmp_path / "a")
    write_tb1(tmp_path / "b")
    (tmp_path / "not-a-task").mkdir()
    assert [p.name for p in find_tasks(tmp_path)] == ["a", "b"]
    assert [p.name for p in find_tasks(tmp_path / "a", tmp_path / "a")] == ["a"]


@pytest.mark.skipif(not TERMIGEN.is_dir(), reason="external TermiGen tasks not present beside the repo (../shared)")
def test_termigen_tasks_all_load():
    paths = find_tasks(TERMIGEN)
    assert len(paths) == 120
    tasks = [load_task(p) for p in paths]
    assert all(t.layout == "harbor" and t.instruction.strip() for t in tasks)
    assert all(t.dockerfile is not None and t.test_script.is_file() for t in tasks)
    assert all(t.solution is None for t in tasks)  # TermiGen ships no reference solutions


@pytest.mark.skipif(not TERMIGEN.is_dir(), reason="external TermiGen tasks not present beside the repo (../shared)")
def test_termigen_converted_to_terminal_bench_layout(tmp_path):
    """A task nobody here wrote, rewritten into the older TB1 layout, loads with the same facts."""
    src = find_tasks(TERMIGEN)[0]
    harbor = load_task(src)
    dst = tmp_path / src.name
    shutil.copytree(src / "environment", dst)
    shutil.copytree(src / "tests", dst / "tests")
    shutil.copy2(src / "tests" / "test.sh", dst / "run-tests.sh")
    import yaml

    (dst / "task.yaml").write_text(yaml.safe_dump({
        "instruction": harbor.instruction, "max_agent_timeout_sec": harbor.agent_timeout_s,
        "max_test_timeout_sec": harbor.verifier_timeout_s, "difficulty": harbor.difficulty}))
    tb = load_task(dst)
    assert tb.layout == "terminal-bench" and tb.instruction == harbor.instruction
    assert (tb.workdir, tb.env) == (harbor.workdir, harbor.env)
    assert tb.agent_timeout_s == harbor.agent_timeout_s


def test_cli_validate(tmp_path, capsys):
    from mirl.cli import main

    write_harbor(tmp_path / "good")
    assert main(["tasks", "validate", str(tmp_path / "good")]) == 0
    write_harbor(tmp_path / "bad", **{"tests/test.sh": None})
    assert main(["tasks", "validate", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "bad: tests/test.sh: missing" in err


def test_cli_names_a_given_path_that_holds_no_task(tmp_path, capsys):
    """`mirl tasks validate good/ typo/` said "1 of 1 tasks valid" and exited 0, typo/ never mentioned."""
    from mirl.cli import main

    write_harbor(tmp_path / "good")
    (tmp_path / "typo").mkdir()
    (tmp_path / "typo" / "Task.toml").write_text('version = "1.0"\n')
    for action in ("validate", "list"):
        assert main(["tasks", action, str(tmp_path / "good"), str(tmp_path / "typo")]) == 1
        assert f"{tmp_path / 'typo'}: no task directories found in it" in capsys.readouterr().err
    assert main(["tasks", "run", str(tmp_path / "good"), str(tmp_path / "typo"), "--sandbox", "local"]) == 2
    assert f"{tmp_path / 'typo'}: no task directories found in it" in capsys.readouterr().err
