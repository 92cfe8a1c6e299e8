"""Reading a Dockerfile into layer steps, and deciding which RUN lines the base can satisfy."""

from __future__ import annotations

import pytest
from sandbox_helpers import data_task

from mirl.sandbox import layers
from mirl.sandbox.base import SandboxError

APT = {"python3", "git", "curl"}
PIP = {"pytest", "numpy", "pip"}


def _step(command: str) -> layers.Step:
    return layers.Step("RUN", 7, f"RUN {command}", "/", {}, command=command)


@pytest.mark.parametrize(
    "command, shim",
    [
        ("echo hi > /x", False),
        ("apt-get update && apt-get install -y --no-install-recommends python3 git && rm -rf /var/lib/apt/lists/*", True),
        ("DEBIAN_FRONTEND=noninteractive apt-get install -y python3=3.11*", True),
        ("pip install --no-cache-dir pytest==8.0 NumPy", True),
        ("python3 -m pip install -U pip", True),
        ("curl --version", False),
    ],
)
def test_runnable_lines(command, shim, task_factory):
    task = task_factory()
    assert layers.check_run(_step(command), APT, PIP, task) is shim


@pytest.mark.parametrize(
    "command, message",
    [
        ("apt-get install -y cowsay", "cowsay"),
        ("apt update && apt install -y git vim", "vim"),
        ("pip3 install requests", "requests"),
        ("pip install -r requirements.txt", "-r <file>"),
        ("wget -q https://example.com/tool.tgz", "downloads"),
    ],
)
def test_refused_lines_name_the_line_and_the_way_out(command, message, task_factory):
    task = task_factory()
    with pytest.raises(SandboxError) as e:
        layers.check_run(_step(command), APT, PIP, task)
    assert message in str(e.value) and "line 7" in str(e.value) and "docker" in str(e.value)


def test_plan_substitutes_arg_and_env_and_keeps_order():
    p = layers.plan(data_task("contract-basic"))
    assert p.base_image == "ghcr.io/example/unpullable-base:1.0"
    assert p.workdir == "/app" and p.env == {"GREETING": "hello", "DATA_DIR": "/srv/data"}
    assert [s.keyword for s in p.steps] == ["ENV", "WORKDIR", "COPY", "COPY", "ADD", "RUN", "RUN"]
    add = p.steps[4]
    assert add.sources == ["bundle.tar.gz"] and add.dest == "/srv/data/"


def test_copy_from_outside_the_context_is_refused(task_factory):
    task = task_factory(dockerfile="FROM x\nCOPY ../secret /s\n")
    with pytest.raises(SandboxError, match="not found|outside"):
        layers.build_script(task, layers.plan(task), APT, PIP)


def test_apply_to_dir_lays_files_like_the_image(tmp_path):
    p, runs, written = layers.apply_to_dir(data_task("contract-basic"), tmp_path)
    assert (tmp_path / "app/data.txt").read_text() == "line one\nline two\n"
    assert (tmp_path / "etc/contract/app.conf").is_file()
    assert (tmp_path / "srv/data/inner/readme.txt").read_text() == "from the archive\n"
    assert [s.line for s in runs] == [10, 11]
    assert written == ["/app/data.txt", "/etc/contract", "/srv/data"]


def test_layer_key_changes_with_the_context(task_factory, tmp_path):
    from pathlib import Path

    task = task_factory(files={"a.txt": "1"})
    rootfs = Path(tmp_path)
    k1 = layers.layer_key(task, rootfs)
    (task.dockerfile.parent / "a.txt").write_text("22")
    assert layers.layer_key(task, rootfs) != k1
