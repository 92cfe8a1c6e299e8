"""The docker backend against a real engine (podman's Docker API): images, commands, hostile input."""

from __future__ import annotations

import logging
import os
import resource
import time
import uuid

import pytest

from mirl.sandbox.base import SandboxConfig
from mirl.sandbox.docker_backend import PIDS_LIMIT, DockerSandbox, build_failure, context_hash, safe_name

pytestmark = [pytest.mark.podman, pytest.mark.timeout(300)]

DOCKERFILE = """\
FROM ghcr.io/nowhere/unpullable-image:1.0
ENV GREETING=hello
WORKDIR /app
COPY data.txt /app/data.txt
"""


@pytest.fixture
def task(task_factory):
    return task_factory("hello", dockerfile=DOCKERFILE, files={"data.txt": "line one\nline two\n"},
                        test_sh="#!/bin/bash\n[ -f /app/done ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")


@pytest.fixture(params=["pid1", "exec"])
def session(request, docker_sandbox, task):
    """A session in both command modes: PID 1's runner, and one `docker exec` per command."""
    sandbox = DockerSandbox(docker_sandbox.config, client=docker_sandbox.client, use_pid1=request.param == "pid1")
    with sandbox.start(task) as s:
        assert (s._pid1 is not None) == (request.param == "pid1")
        yield s


# --- pure helpers -------------------------------------------------------------------------


def test_safe_name_makes_valid_repository_names():
    assert safe_name("Aide_File__Integrity") == "aide_file-integrity"
    assert safe_name("--") == "task"


def test_context_hash_changes_with_content_and_mode(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    h1 = context_hash(tmp_path, "FROM x")
    assert context_hash(tmp_path, "FROM x") == h1
    (tmp_path / "a.txt").write_text("y")
    h2 = context_hash(tmp_path, "FROM x")
    os.chmod(tmp_path / "a.txt", 0o755)
    assert len({h1, h2, context_hash(tmp_path, "FROM x"), context_hash(tmp_path, "FROM y")}) == 4


def test_build_failure_names_missing_apt_packages():
    msg = build_failure("t", "exit 100", ["E: Unable to locate package libfoo-dev", "E: Unable to locate package bar"])
    assert "apt packages not found on the base image's distribution: bar, libfoo-dev" in msg


# --- images -------------------------------------------------------------------------------


def test_unpullable_from_is_substituted_and_image_is_cached(docker_sandbox, task, task_factory, caplog):
    caplog.set_level(logging.WARNING)
    tag = docker_sandbox.image_for(task)
    assert tag.startswith("mirl-task-hello:")
    t0 = time.monotonic()
    assert docker_sandbox.image_for(task) == tag  # cached by content hash
    assert time.monotonic() - t0 < 2.0
    other = task_factory("hello2", dockerfile=DOCKERFILE, files={"data.txt": "changed\n"})
    assert docker_sandbox.image_for(other).split(":")[1] != tag.split(":")[1]


def test_multi_stage_names_are_not_substituted(docker_sandbox, task_factory):
    t = task_factory("stages", dockerfile="FROM mirl-base AS builder\nRUN echo built > /built\n"
                                         "FROM builder\nWORKDIR /w\n")
    with docker_sandbox.start(t) as s:
        assert s.run("cat /built; pwd").output == "built\n/w\n"


def test_build_error_is_a_clear_sandbox_error(docker_sandbox, task_factory):
    from mirl.sandbox.base import SandboxError

    t = task_factory("broken", dockerfile="FROM mirl-base\nRUN echo about to fail && exit 7\n")
    with pytest.raises(SandboxError, match="broken: image build failed"):
        docker_sandbox.image_for(t)


# --- the session contract -----------------------------------------------------------------


def test_session_starts_in_workdir_with_env_files_and_empty_logs(session):
    r = session.run("pwd; echo $GREETING; cat data.txt; ls -A /logs/verifier | wc -l")
    assert r.output == "/app\nhello\nline one\nline two\n0\n"
    assert r.exit_code == 0 and not r.timed_out


def test_each_command_is_a_fresh_shell_but_files_persist(session):
    session.run("cd /tmp && export FOO=1 && echo hi > /app/note")
    r = session.run('pwd; echo "[$FOO]"; cat note')
    assert r.output == "/app\n[]\nhi\n"


def test_stdout_and_stderr_interleave_in_order_and_exit_code(session):
    r = session.run("echo a; echo b >&2; echo c; exit 3")
    assert r.output == "a\nb\nc\n" and r.exit_code == 3


def test_non_utf8_output_is_replaced(session):
    r = session.run(r"printf 'ok \xff\xfe end'")
    assert r.output == "ok \ufffd\ufffd end"


def test_background_child_does_not_hang_the_call(session):
    t0 = time.monotonic()
    r = session.run("sleep 30 & echo started")
    assert time.monotonic() - t0 < 3 and r.output == "started\n"
    assert "sleep 30" in session.run("ps -eo args").output  # background processes survive


def test_timeout_kills_the_whole_tree_and_returns_in_time(session):
    t0 = time.monotonic()
    r = session.run("sleep 1000 & (sleep 999; echo never) & while true; do :; done", timeout=2)
    elapsed = time.monotonic() - t0
    assert r.timed_out and r.exit_code == 124
    assert elapsed < 4.0
    procs = session.run("ps -eo args").output
    assert "sleep 1000" not in procs and "sleep 999" not in procs


def test_output_flood_is_capped_without_hanging(docker_sandbox, task):
    config = SandboxConfig(backend="docker", output_limit=2000)
    sandbox = DockerSandbox(config, client=docker_sandbox.client)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with sandbox.start(task) as s:
        t0 = time.monotonic()
        r = s.run("head -c 1000000000 /dev/zero | tr '\\0' a; echo; echo END", timeout=60)
        elapsed = time.monotonic() - t0
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert r.truncated and len(r.output) < 2200 and r.output.endswith("END\n"), r.output[-100:]
    assert "bytes of output elided" in r.output
    assert elapsed < 62 and grown_mb < 200


def test_verify_reads_reward_and_resets_logs(session):
    session.run("echo 1 > /logs/verifier/reward.txt")  # an agent cannot pre-write its reward
    v = session.verify()
    assert v.reward == 0.0 and v.error is None
    session.run("touch /app/done")
    assert session.verify().reward == 1.0


def test_verify_without_reward_file_is_an_error(docker_sandbox, task_factory):
    t = task_factory("noreward", test_sh="#!/bin/bash\necho checking\nexit 1\n")
    with docker_sandbox.start(t) as s:
        v = s.verify()
    assert v.reward == 0.0 and "no reward file" in v.error and v.exit_code == 1 and "checking" in v.tail


def test_verify_reward_json(docker_sandbox, task_factory):
    t = task_factory("json", test_sh='#!/bin/bash\necho \'{"reward": 0.5}\' > /logs/verifier/reward.json\n')
    with docker_sandbox.start(t) as s:
        assert s.verify().reward == 0.5


def test_terminal_bench_layout_scores_by_exit_code(docker_sandbox, tmp_path):
    from mirl.tasks import load_task

    root = tmp_path / "tb1"
    (root / "tests").mkdir(parents=True)
    (root / "task.yaml").write_text("instruction: make /app/x\nmax_test_timeout_sec: 30\n")
    (root / "Dockerfile").write_text("FROM mirl-base\nWORKDIR /app\n")
    (root / "run-tests.sh").write_text("#!/bin/bash\ntest -f /app/x && test -f /tests/check.txt\n")
    (root / "tests" / "check.txt").write_text("x")
    t = load_task(root)
    with docker_sandbox.start(t) as s:
        assert s.verify().reward == 0.0
        s.run("touch /app/x")
        v = s.verify()
    assert v.reward == 1.0 and v.error is None


# --- hostile commands ---------------------------------------------------------------------


def test_writes_stay_inside_and_next_session_is_clean(docker_sandbox, task):
    name = f"/tmp/mirl-escape-{uuid.uuid4().hex}"
    with docker_sandbox.start(task) as s:
        assert s.run(f"echo x > {name} && echo x > /root/owned && rm -rf /app/data.txt").exit_code == 0
    assert not os.path.exists(name)
    with docker_sandbox.start(task) as s:
        r = s.run(f"ls {name} /root/owned 2>&1; cat /app/data.txt")
    assert "No such file" in r.output and "line one" in r.output


def test_host_env_and_home_are_not_visible(session, monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("MIRL_TEST_SECRET", secret)
    r = session.run("env; ls -a /root; cat /proc/1/environ | tr '\\0' '\\n'")
    assert secret not in r.output
    assert "mirl" not in session.run("ls -a /root/.cache 2>&1").output


def test_network_is_disabled_unless_allowed(docker_sandbox, task):
    r = docker_sandbox  # task.allow_internet is false by default in write_task
    with r.start(task) as s:
        out = s.run("curl -sS -m 5 -o /dev/null http://deb.debian.org/ && echo REACHED; ip -o link | grep -v ' lo:' | wc -l", timeout=15)
    assert "REACHED" not in out.output
    assert out.output.strip().endswith("0")


def test_network_when_task_and_config_allow(docker_sandbox, task_factory):
    t = task_factory("net", toml="[environment]\nallow_internet = true\n")
    sandbox = DockerSandbox(SandboxConfig(backend="docker", allow_internet=True), client=docker_sandbox.client)
    with sandbox.start(t) as s:
        out = s.run("ip -o link | grep -v ' lo:' | wc -l").output.strip()
    assert out != "0"


def test_fork_bomb_is_contained(session):
    t0 = time.monotonic()
    session.run(":(){ :|:& };:", timeout=5)
    assert time.monotonic() - t0 < 8
    assert os.system("true") == 0  # the host still forks
    if session._pid1 is None:
        return  # exec mode: contained by the pids limit; the session may stay saturated until closed
    # PID 1 clears a saturated process table before the next command, so the session stays usable
    t0 = time.monotonic()
    r = session.run("echo alive; ls /proc | grep -c '^[0-9]'", timeout=10)
    assert "alive\n" in r.output and not r.timed_out and time.monotonic() - t0 < 12, r.output[-300:]
    assert int(r.output.split()[-1]) <= PIDS_LIMIT


def test_image_without_python_falls_back_to_exec(docker_sandbox, task_factory):
    t = task_factory("nopython", dockerfile="FROM mirl-base\nRUN rm -f /usr/bin/python3*\nWORKDIR /w\n")
    with docker_sandbox.start(t) as s:
        assert s._pid1 is None
        r = s.run("pwd; command -v python3 || echo none")
    assert r.output == "/w\nnone\n"


def test_kill_all_processes_leaves_the_container_usable(session):
    session.run("sleep 500 &")
    t0 = time.monotonic()
    session.run("kill -9 -1", timeout=10)  # every process but the shell itself and the container's init
    assert time.monotonic() - t0 < 5
    after = session.run("echo still here; ps -eo args")
    assert after.output.startswith("still here\n") and "sleep 500" not in after.output


def test_close_removes_container_with_daemons_and_is_idempotent(docker_sandbox, task):
    import docker

    s = docker_sandbox.start(task)
    s.run("nohup sleep 777 >/dev/null 2>&1 & setsid sleep 778 &")
    cid = s.container.id
    t0 = time.monotonic()
    s.close()
    assert time.monotonic() - t0 < 5
    s.close()
    with pytest.raises(docker.errors.NotFound):
        docker_sandbox.client.containers.get(cid)
    host = os.popen("ps -eo args").read()
    assert "sleep 777" not in host and "sleep 778" not in host


def test_requests_injected_into_pid1_do_not_confuse_the_session(docker_sandbox, task):
    with docker_sandbox.start(task) as s:
        assert s._pid1 is not None
        s.run("""echo '{"id": "x", "cmd": "echo injected"}' > /proc/1/fd/0; echo 'not json' > /proc/1/fd/0""")
        r = s.run("echo mine")
        assert r.output == "mine\n" and r.exit_code == 0
        assert s._pid1 is not None
