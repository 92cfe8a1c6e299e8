"""The docker backend against a real engine (podman's Docker API): images, commands, hostile input."""

from __future__ import annotations

import logging
import os
import time
import uuid

import pytest
from sandbox_helpers import PeakCount, flood_in_fresh_process, wait_until_gone

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


def test_archives_sent_to_the_engine_end_at_their_end_blocks(tmp_path):
    """No zero padding after the two end blocks: podman closes its pipe there, and a sender still
    writing padding gets a spurious 500 "broken pipe" (containers/buildah#6573)."""
    import io
    import tarfile

    from mirl.sandbox.docker_backend import _dir_tar, _tree_tar

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test.sh").write_text("exit 0\n" * 100)
    for data in (_dir_tar(["logs", "logs/verifier"], {"bin/x": (b"#!/bin/sh\n", 0o755)}),
                 _tree_tar(tmp_path / "t", "tests", {"extra": tmp_path / "t" / "test.sh"})):
        assert len(data) % tarfile.BLOCKSIZE == 0 and data[-2 * tarfile.BLOCKSIZE:] == bytes(2 * tarfile.BLOCKSIZE)
        assert data[-3 * tarfile.BLOCKSIZE:-2 * tarfile.BLOCKSIZE] != bytes(tarfile.BLOCKSIZE)  # the last member's
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            assert tar.getnames()  # and it is a whole archive


def test_build_failure_names_missing_apt_packages():
    msg = build_failure("t", "exit 100", ["E: Unable to locate package libfoo-dev", "E: Unable to locate package bar"])
    assert "apt packages not found on the base image's distribution: bar, libfoo-dev" in msg


# --- images -------------------------------------------------------------------------------


def _expected_digest(sandbox, task) -> str:
    """The content hash of the task's context and its Dockerfile with FROM replaced by the base image."""
    text = task.dockerfile.read_text().replace("ghcr.io/nowhere/unpullable-image:1.0", sandbox.config.base_image)
    return context_hash(task.context_dir, text, sandbox.client.images.get(sandbox.config.base_image).id)


def test_unpullable_from_is_substituted_and_image_is_cached(docker_sandbox, task, task_factory, caplog, monkeypatch):
    caplog.set_level(logging.WARNING)
    tag = docker_sandbox.image_for(task)
    assert tag == f"mirl-task-hello:{_expected_digest(docker_sandbox, task)[:12]}"
    assert "ghcr.io/nowhere/unpullable-image:1.0" in caplog.text
    image_id = docker_sandbox.client.images.get(tag).id
    # a fresh sandbox (nothing remembered in memory) finds the image by its content hash: no build
    fresh = DockerSandbox(docker_sandbox.config, client=docker_sandbox.client)
    builds = []
    real_build = fresh.client.api.build
    monkeypatch.setattr(fresh.client.api, "build", lambda *a, **k: builds.append(k) or real_build(*a, **k))
    assert fresh.image_for(task) == tag and builds == []
    assert docker_sandbox.client.images.get(tag).id == image_id
    other = task_factory("hello2", dockerfile=DOCKERFILE, files={"data.txt": "changed\n"})
    other_tag = f"mirl-task-hello2:{_expected_digest(fresh, other)[:12]}"
    if fresh._has_image(other_tag):  # left by an earlier run of this test: the build must happen again
        fresh.client.images.remove(other_tag)
    assert fresh.image_for(other) == other_tag and len(builds) == 1


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
    r = session.run("sleep 30 & echo started", timeout=60)
    assert time.monotonic() - t0 < 25 and (r.output, r.timed_out) == ("started\n", False)  # not the child's 30 s
    assert "sleep 30" in session.run("ps -eo args").output  # background processes survive


def test_timeout_kills_the_whole_tree_and_returns_in_time(session):
    t0 = time.monotonic()
    r = session.run("sleep 1000 & (sleep 999; echo never) & while true; do :; done", timeout=2)
    elapsed = time.monotonic() - t0
    assert r.timed_out and r.exit_code == 124
    assert 2 <= elapsed < 60
    procs = session.run("ps -eo args").output
    assert "sleep 1000" not in procs and "sleep 999" not in procs


@pytest.mark.parametrize("mode", ["pid1", "exec"])
def test_output_flood_is_capped_in_bounded_memory(docker_sandbox, mode):
    r = flood_in_fresh_process("docker", "head -c 1000000000 /dev/zero | tr '\\0' a; echo; echo END", 2000,
                               use_pid1=mode == "pid1")
    assert (r["exit_code"], r["truncated"], r["timed_out"]) == (0, True, False)
    elided = 1_000_000_000 + len("\nEND\n") - 2000
    assert r["output"] == "a" * 1000 + f"\n[... {elided} bytes of output elided ...]\n" + "a" * 995 + "\nEND\n"
    assert r["grown_mb"] < 200, f"memory grew by {r['grown_mb']:.0f} MB"


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


@pytest.mark.parametrize("mode", ["pid1", "exec"])
def test_host_env_and_home_are_not_visible(docker_sandbox, task, monkeypatch, mode):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("MIRL_TEST_SECRET", secret)  # before the session starts, so it could leak into it
    sandbox = DockerSandbox(docker_sandbox.config, client=docker_sandbox.client, use_pid1=mode == "pid1")
    with sandbox.start(task) as s:
        r = s.run("env; ls -a /root; cat /proc/1/environ | tr '\\0' '\\n'")
        cache = s.run("ls -a /root/.cache 2>&1").output
    assert "GREETING=hello" in r.output and secret not in r.output
    assert "mirl" not in cache


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


def test_background_fork_bomb_is_contained(session):
    """The classic bomb backgrounds itself and the command returns: it must still hit the pids limit."""
    token = f"MIRL_BOMB={uuid.uuid4().hex}"
    counter = PeakCount(token)
    counter.start()
    r = session.run(f"env {token} bash -c ':(){{ :|:& }};:'; sleep 3", timeout=5)
    peak = counter.stop()
    assert 100 < peak <= PIDS_LIMIT, f"peak of {peak} processes: the bomb did not run, or was not bounded"
    if session._pid1 is None:
        assert r.exit_code in (0, 124), r.output[-300:]
        return  # exec mode: contained by the pids limit; the session may stay saturated until closed
    # PID 1 clears a saturated process table before the next command, so the session stays usable
    after = session.run("echo alive; ls /proc | grep -c '^[0-9]'", timeout=10)
    assert "alive\n" in after.output and not after.timed_out, after.output[-300:]
    assert int(after.output.split()[-1]) < 10, after.output[-300:]  # the bomb is gone, not just capped
    assert wait_until_gone(token) == []


def test_image_without_python_falls_back_to_exec(docker_sandbox, task_factory):
    t = task_factory("nopython", dockerfile="FROM mirl-base\nRUN rm -f /usr/bin/python3*\nWORKDIR /w\n")
    with docker_sandbox.start(t) as s:
        assert s._pid1 is None
        r = s.run("pwd; command -v python3 || echo none")
    assert r.output == "/w\nnone\n"


def test_kill_all_processes_leaves_the_container_usable(session):
    assert "sleep 500" in session.run("sleep 500 & sleep 0.2; ps -eo args").output
    r = session.run("kill -9 -1", timeout=10)  # every process but the shell itself and the container's init
    assert not r.timed_out
    after = session.run("echo still here; ps -eo args")
    assert after.output.startswith("still here\n") and "sleep 500" not in after.output


def test_close_removes_container_with_daemons_and_is_idempotent(docker_sandbox, task):
    import docker

    s = docker_sandbox.start(task)
    s.run("nohup sleep 777 >/dev/null 2>&1 & setsid sleep 778 &")
    cid = s.container.id
    s.close()
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
