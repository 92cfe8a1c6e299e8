"""`mirl rollout` killed with SIGKILL mid-run and started again, on real sandboxes.

The resumed run must finish every (task, seed) pair exactly once, with no torn or doubled
record, and nothing of the killed run may outlive it: no container, no bwrap process, no
process the agent started in the sandbox, no mount, no temp dir.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from mirl.sandbox.owner import owner_id
from mirl.sandbox.process import PIDS_ROOT
from tests.fakes.openai_server import serve

REPO = Path(__file__).resolve().parents[2]
TASKS = ["count-lines", "make-dir-tree"]
SEEDS = 2

pytestmark = pytest.mark.timeout(150)


def _policy(marker: str):
    """Step 1 starts a background process (tagged by `marker`) that would outlive a killed run;
    step 2 looks around; step 3 submits. Each reply is slowed so the run can be caught mid-way."""

    def reply(body: dict) -> str:
        time.sleep(0.05)
        steps = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if steps == 0:
            return f"THOUGHT: start a service.\n```bash\nsleep {marker} >/dev/null 2>&1 &\necho started\n```"
        if steps == 1:
            return "THOUGHT: look.\n```bash\npwd\n```"
        return "THOUGHT: done.\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"

    return reply


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _complete_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _procs_with(needle: bytes) -> list[tuple[int, str]]:
    """(pid, command line) of host processes whose environment or command line holds `needle`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        args = cmdline.replace(b"\0", b" ").strip()
        if needle in args or needle in environ.split(b"\0"):
            found.append((int(name), args.decode(errors="replace")[:200]))
    return found


def _task_containers(request, backend: str) -> set[str]:
    """Ids and states of the engine's containers of TASKS (labelled with the task id by the backend)."""
    if backend != "docker":
        return set()
    client = request.getfixturevalue("docker_sandbox").client
    return {f"{c.id} {c.status}" for c in client.containers.list(all=True) if c.labels.get("mirl.task") in TASKS}


@pytest.mark.parametrize("backend", [pytest.param("bwrap", marks=pytest.mark.bwrap),
                                     pytest.param("docker", marks=pytest.mark.podman)])
def test_rollout_killed_mid_run_resumes_exactly_once_and_leaves_nothing(request, tmp_path, backend):
    request.getfixturevalue(f"{backend}_sandbox")  # the backend runs here, or missing() says why
    marker = f"{1000 + uuid.uuid4().int % 9000}.{uuid.uuid4().int % 10**6:06d}"  # `sleep 4242.123456`
    token = f"MIRL_KILL_TEST={uuid.uuid4().hex}"
    server, url = serve(reply=_policy(marker))
    out, tmp = tmp_path / "run", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp), "OPENAI_API_KEY": "sk-kill-resume-test-0000",
           token.split("=")[0]: token.split("=")[1]}
    cmd = [sys.executable, "-m", "mirl", "rollout", "--tasks", *(str(REPO / "tasks" / t) for t in TASKS),
           "--sandbox", backend, "--seeds", str(SEEDS), "--out", str(out), "--model", "openai/test-policy",
           "--api-base", url, "--max-steps", "5", "--no-progress"]
    path = out / "trajectories.jsonl"
    containers_before = _task_containers(request, backend)
    try:
        first = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        # kill once a record is written and a later episode is mid-way: its background sleep runs
        deadline = time.monotonic() + 60
        while first.poll() is None and time.monotonic() < deadline:
            if _complete_lines(path) >= 1 and _procs_with(f"sleep {marker}".encode()):
                break
            time.sleep(0.02)
        assert first.poll() is None, f"the run ended before it could be killed:\n{first.stdout.read().decode()[-3000:]}"
        assert _complete_lines(path) >= 1, "no record written within 60 s"
        killed = owner_id(first.pid)  # what its containers and cgroups are labelled with
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
        before = _records(path)
        assert 1 <= len(before) < len(TASKS) * SEEDS, "killed after the run had finished"
        second = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=90)
        assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    finally:
        server.shutdown()
    records = _records(path)  # every line parses: no torn record
    pairs = sorted((r["task"], r["seed"]) for r in records)
    assert pairs == sorted((t, s) for t in TASKS for s in range(SEEDS)), pairs  # each pair exactly once
    assert records[: len(before)] == before  # the killed run's records are kept as they were
    assert all(r["exit_reason"] == "submitted" and r["steps"][0]["output"] == "started\n" for r in records)
    assert f"{len(records) - len(before)} episode(s) played, {len(before)} already done" in second.stdout

    # nothing of either run is left: processes, the agent's background sleeps, mounts, temp dirs, containers
    left = []
    for _ in range(50):
        left = _procs_with(token.encode()) + _procs_with(f"sleep {marker}".encode())
        if not left:
            break
        time.sleep(0.1)
    assert left == [], left
    with open("/proc/mounts") as f:
        assert [m for m in f.read().splitlines() if str(tmp_path) in m] == []
    assert sorted(p.name for p in tmp.iterdir()) == []
    assert [c.name for c in PIDS_ROOT.glob(f"mirl-*_{killed}")] == []
    assert _task_containers(request, backend) - containers_before == set()
    if backend == "docker":
        client = request.getfixturevalue("docker_sandbox").client
        assert client.containers.list(all=True, filters={"label": f"mirl.owner={killed}"}) == []
