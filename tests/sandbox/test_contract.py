"""The Sandbox contract (mirl.sandbox.base docstring), checked against every available backend."""

from __future__ import annotations

import re
import shlex
import shutil
import time
import uuid
from pathlib import Path

import pytest
from sandbox_helpers import data_task, flood_in_fresh_process, host_pids_with, wait_until_gone

from mirl.sandbox.base import TIMEOUT_EXIT_CODE

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def session(sandbox):
    with sandbox.start(data_task("contract-basic")) as s:
        yield s


def test_task_files_workdir_env_and_run_lines(session):
    r = session.run("pwd; echo $GREETING $DATA_DIR; cat data.txt /etc/contract/app.conf; cat $DATA_DIR/inner/readme.txt")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == ["/app", "hello /srv/data", "line one", "line two", "mode = test", "from the archive"]
    r = session.run("cat /app/built.txt && test -d /srv/data/made-by-run && ls -A /logs/verifier | wc -l")
    assert r.output.split() == ["built", "0"], r.output


def test_each_command_is_a_fresh_shell_but_files_persist(session):
    assert session.run("cd /tmp && export FOO=1 && echo kept > /app/note.txt").exit_code == 0
    r = session.run("pwd; echo ${FOO:-unset}; cat /app/note.txt")
    assert r.output.split() == ["/app", "unset", "kept"]


def test_exit_code_duration_and_interleaved_output(session):
    r = session.run("echo out; echo err >&2; echo out2 >&1; exit 7")
    assert r.exit_code == 7 and not r.timed_out
    assert r.output.splitlines() == ["out", "err", "out2"]
    assert 0 < r.duration_s < 30


def test_returns_when_shell_exits_although_a_child_holds_the_pipe(session):
    t0 = time.monotonic()
    r = session.run("sleep 60 & echo started", timeout=90)
    assert (r.output, r.exit_code, r.timed_out) == ("started\n", 0, False)
    assert time.monotonic() - t0 < 30  # not held until the child's 60 s are up


def test_background_service_survives_between_commands(session):
    port = 20000 + uuid.uuid4().int % 20000
    r = session.run(f"python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > /tmp/svc.pid")
    assert r.exit_code == 0
    r = session.run(
        f"for i in $(seq 50); do curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/ && exit 0; sleep 0.1; done; exit 1",
        timeout=30,
    )
    assert r.exit_code == 0 and r.output.endswith("200"), r.output


LIVE_SLEEPS = "ps -eo stat=,args= | grep -v '^Z' | grep -cE 'sleep 30[123]$'"  # zombies are dead already


def test_timeout_kills_the_whole_tree_and_returns_in_time(session):
    probe = session.run(f"sleep 301 & sleep 0.2; {LIVE_SLEEPS}; kill $!; wait")
    assert probe.output.strip() == "1", probe.output  # the probe sees a live sleep
    t0 = time.monotonic()
    r = session.run("sleep 301 & (sleep 302; echo never) & sleep 303", timeout=1.5)
    elapsed = time.monotonic() - t0
    assert r.timed_out and r.exit_code == TIMEOUT_EXIT_CODE
    assert 1.5 <= elapsed < 60, elapsed
    assert session.run(LIVE_SLEEPS).output.strip() == "0"


def test_output_is_capped_and_a_1gb_flood_is_bounded(sandbox):
    limit = 2000
    r = flood_in_fresh_process(sandbox.name, "yes | head -c 1G; echo; echo THE-END", limit)
    assert (r["exit_code"], r["truncated"], r["timed_out"]) == (0, True, False)
    # head: limit/2 bytes of "y\n"; tail: the flood's last bytes, then the newline echo adds and THE-END
    head, tail = "y\n" * (limit // 4), ("y\n" * limit)[-(limit // 2 - len("\nTHE-END\n")):] + "\nTHE-END\n"
    elided = 2**30 + len("\nTHE-END\n") - limit
    assert r["output"] == f"{head}\n[... {elided} bytes of output elided ...]\n{tail}"
    assert r["grown_mb"] < 200, f"memory grew by {r['grown_mb']:.0f} MB"


def test_non_utf8_output_is_replaced_not_fatal(session):
    r = session.run(r"printf 'ok \xff\xfe done\n'")
    assert (r.output, r.exit_code) == ("ok \ufffd\ufffd done\n", 0)


def test_verify_copies_tests_only_afterwards_and_reads_reward(session):
    assert session.run("test -e /tests/test.sh").exit_code != 0, "tests must not be visible to the agent"
    assert session.verify().reward == 0.0
    session.run("echo 42 > /app/answer.txt")
    v = session.verify()
    assert v.reward == 1.0 and v.error is None and v.exit_code == 0
    assert "answer ok" in v.tail


def test_missing_reward_file_scores_zero_with_an_error(sandbox, task_factory):
    task = task_factory("noreward", test_sh="#!/bin/bash\necho checked\n")
    with sandbox.start(task) as s:
        v = s.verify()
    assert (v.reward, v.exit_code, v.tail) == (0.0, 0, "checked")
    assert v.error == "no reward file written to /logs/verifier (reward.txt or reward.json)"


def test_verifier_timeout_is_reported(sandbox, task_factory):
    task = task_factory("slowtest", test_sh="#!/bin/bash\nsleep 30\n", toml="[verifier]\ntimeout_sec = 1.0\n")
    with sandbox.start(task) as s:
        v = s.verify()
    assert v.timed_out and v.reward == 0.0 and v.exit_code == TIMEOUT_EXIT_CODE
    assert v.error == "the verifier timed out after 1s"


def test_terminal_bench_layout_scores_by_exit_code(sandbox):
    with sandbox.start(data_task("contract-tb1")) as s:
        assert s.verify().reward == 0.0
        s.run("touch /app/done.txt")
        v = s.verify()
    assert v.reward == 1.0, v


# --- one verification rule for every backend ----------------------------------------------

REWARD_TXT, REWARD_JSON = "/logs/verifier/reward.txt", "/logs/verifier/reward.json"


def write_tb1_task(root: Path, run_tests: str, timeout_s: float = 60):
    """A Terminal-Bench 1 task at `root` whose run-tests.sh is `run_tests`."""
    from mirl.tasks import load_task

    (root / "tests").mkdir(parents=True)
    (root / "task.yaml").write_text(f"instruction: do nothing\nmax_test_timeout_sec: {timeout_s}\n")
    (root / "Dockerfile").write_text("FROM mirl-base\nWORKDIR /app\n")
    (root / "run-tests.sh").write_text(run_tests)
    return load_task(root)


def test_reward_written_then_hanging_scores_zero_and_says_why(sandbox, task_factory):
    task = task_factory("hangs", test_sh=f"#!/bin/bash\necho 1 > {REWARD_TXT}\nsleep 300\n",
                        toml="[verifier]\ntimeout_sec = 1.5\n")
    with sandbox.start(task) as s:
        v = s.verify()
    assert v.timed_out and v.reward == 0.0, v
    assert re.search(r"timed out after 1\.5 ?s", v.error or ""), v.error


def test_terminal_bench_reward_written_then_hanging_scores_zero(sandbox, tmp_path):
    task = write_tb1_task(tmp_path / "tb1-hangs", f"#!/bin/bash\necho 1 > {REWARD_TXT}\nsleep 300\n", timeout_s=1.5)
    with sandbox.start(task) as s:
        v = s.verify()
    assert v.timed_out and v.reward == 0.0, v
    assert re.search(r"timed out after 1\.5 ?s", v.error or ""), v.error


def test_terminal_bench_reward_file_wins_over_the_exit_code(sandbox, tmp_path):
    task = write_tb1_task(tmp_path / "tb1-reward", f"#!/bin/bash\necho 0.25 > {REWARD_TXT}\nexit 0\n")
    with sandbox.start(task) as s:
        v = s.verify()
    assert (v.reward, v.exit_code, v.error) == (0.25, 0, None), v


def test_reward_json_is_read_before_reward_txt(sandbox, task_factory):
    script = f"#!/bin/bash\necho 0.75 > {REWARD_TXT}\necho '{{\"reward\": 0.25}}' > {REWARD_JSON}\n"
    with sandbox.start(task_factory("both", test_sh=script)) as s:
        v = s.verify()
    assert (v.reward, v.error) == (0.25, None), v


def test_reward_files_the_agent_wrote_are_not_read(sandbox, task_factory):
    with sandbox.start(task_factory("prewritten", test_sh="#!/bin/bash\necho checked\n")) as s:
        s.run(f"echo 1 > {REWARD_TXT}; echo '{{\"reward\": 1}}' > {REWARD_JSON}; mkdir -p /tests; touch /tests/stale")
        v = s.verify()
        left = s.run("ls -A /logs/verifier /tests").output.split()
    assert (v.reward, v.error) == (0.0, "no reward file written to /logs/verifier (reward.txt or reward.json)"), v
    assert left == ["/logs/verifier:", "/tests:", "test.sh"], left


def test_the_tests_run_from_a_fresh_folder_whatever_the_agent_made_of_it(sandbox, task_factory):
    """An agent that replaced /tests with a link to a folder of its own (a conftest.py there would run
    beside the task's tests and could pass them) or with a file still gets the task's tests alone."""
    script = "#!/bin/bash\nls -A /tests > /logs/verifier/seen.txt; echo 1 > /logs/verifier/reward.txt\n"
    with sandbox.start(task_factory("replaced-tests", test_sh=script)) as s:
        for make in ("mkdir -p /app/fake && echo x > /app/fake/conftest.py && rm -rf /tests && ln -s /app/fake /tests",
                     "rm -rf /tests; echo x > /tests"):
            s.run(make)
            v = s.verify()
            seen = s.read_file("/logs/verifier/seen.txt") or ""
            seen = seen.decode() if isinstance(seen, bytes) else seen
            assert v.reward == 1.0 and seen.split() == ["test.sh"], (v, seen)
        assert s.run("cat /app/fake/conftest.py").output == "x\n"  # the link's target is left as it was


def test_a_tasks_tests_folder_that_is_a_link_is_read_through(sandbox, tmp_path):
    """Task suites share a tests folder by linking to it: what is put into /tests is the folder's files."""
    from mirl.tasks import load_task
    from tests.conftest import write_task

    shared = tmp_path / "shared-tests"
    shared.mkdir()
    (shared / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    root = write_task(tmp_path / "linked")
    shutil.rmtree(root / "tests")
    (root / "tests").symlink_to(shared, target_is_directory=True)
    with sandbox.start(load_task(root)) as s:
        v = s.verify()
    assert (v.reward, v.error) == (1.0, None), v


@pytest.mark.parametrize("name, content, reason", [
    ("reward.txt", "nan", "reward.txt is not a number: 'nan'"),
    ("reward.txt", "inf", "reward.txt is not a number: 'inf'"),
    ("reward.txt", "passed", "reward.txt is not a number: 'passed'"),
    ("reward.txt", "", "reward.txt is empty"),
    ("reward.json", '{"reward": NaN}', "reward.json has no numeric reward: '{\"reward\": NaN}'"),
    ("reward.json", '{"reward": "yes"}', "reward.json has no numeric reward: '{\"reward\": \"yes\"}'"),
    ("reward.json", "", "reward.json is empty"),
])
def test_unusable_reward_file_scores_zero_with_the_reason(sandbox, task_factory, name, content, reason):
    # printf writes exactly `content` (an empty file for ""); the script itself exits 0
    script = f"#!/bin/bash\nprintf '%s' {shlex.quote(content)} > /logs/verifier/{name}\n"
    with sandbox.start(task_factory("bad-reward", test_sh=script)) as s:
        v = s.verify()
    assert (v.reward, v.exit_code, v.timed_out) == (0.0, 0, False), v
    assert v.error == reason


def test_close_ends_processes_and_is_idempotent(sandbox):
    token = f"MIRL_TEST_TOKEN={uuid.uuid4().hex}"
    s = sandbox.start(data_task("contract-basic"))
    with s:
        assert s.run(f"export {token}; sleep 300 >/dev/null 2>&1 & sleep 0.2").exit_code == 0
        assert len(host_pids_with(token)) == 1, "the background sleep should be running before close"
    s.close()  # a second close is harmless
    assert wait_until_gone(token) == []
