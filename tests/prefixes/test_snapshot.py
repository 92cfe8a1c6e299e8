"""The prefix stage's snapshot mode end to end on the real docker and bwrap backends: a reproduced
prefix is saved, restored in a fresh sandbox and kept when its last command prints what it printed;
a prefix that starts a process is not snapshot-kept; one that does not reproduce is not saved."""

from __future__ import annotations

import json
import time

import pytest
from recorded_runs import recorded_run

from mirl.params import make
from mirl.prefixes.stage import run_prefixes
from mirl.runner.inputs import load_prefixes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SCENARIOS = {
    # files made, changed and deleted in and outside /app; the last command reads them back
    "snap-files": ["mkdir -p out && printf 'a\\nb\\n' > out/f.txt && echo x > /root/.made",
                   "chmod 640 out/f.txt && rm -f /etc/debian_version && echo changed >> /etc/os-release",
                   "stat -c '%a %n' out/f.txt; cat out/f.txt /root/.made; ls /etc/debian_version 2>&1; tail -1 /etc/os-release"],
    "snap-service": ["python3 -m http.server 8765 >/dev/null 2>&1 &", "echo started"],
    "snap-random": ["head -c 12 /dev/urandom | base64 > r.txt", "cat r.txt"],
    # the last command is not idempotent: re-running it on the restored state would print 2, not 1
    "snap-append": ["echo x >> log.txt; wc -l < log.txt"],
}


@pytest.fixture(params=["docker", "bwrap"])
def sandbox(request):
    return request.getfixturevalue(f"{request.param}_sandbox")


def test_snapshot_mode_keeps_reproduced_file_prefixes(tmp_path, sandbox, task_factory):
    tasks = recorded_run(tmp_path / "run", sandbox, task_factory, SCENARIOS)
    recorded = {t["task"]: t for t in (json.loads(x) for x in
                                       (tmp_path / "run/profiling/trajectories.jsonl").read_text().splitlines())}
    assert recorded["snap-files"]["steps"][-1]["output"] == (
        "640 out/f.txt\na\nb\nx\nls: cannot access '/etc/debian_version': No such file or directory\nchanged\n")
    params = make(prefixes={"per_misbehavior": 1, "heldout_per_misbehavior": 0, "snapshot": True})
    t0 = time.perf_counter()
    summary = run_prefixes(params, tmp_path / "run", sandbox=sandbox, tasks=list(tasks.values()), progress=False)
    elapsed = time.perf_counter() - t0
    got = {p.env: p for p in load_prefixes(tmp_path / "run")}
    handles = [p.restore.get("snapshot") for p in got.values()]
    try:
        files = got["snap-files"]
        assert files.error is None
        assert files.verdict == {"exact": True, "normalized": True, "snapshot": True}
        assert files.restore["snapshot"] in sandbox.list_snapshots("snap-files")
        for key in ("rerun_s", "restore_s"):  # measured, and within the stage's own wall time
            assert 0 < files.restore[key] < elapsed, key
        service = got["snap-service"]  # reproduces, but its server would not run after a restore
        assert service.verdict == {"exact": True, "normalized": True, "snapshot": False}
        assert "starts processes" in service.restore["snapshot"] and "restore_s" not in service.restore
        random = got["snap-random"]  # not reproduced: nothing is saved
        assert random.verdict == {"exact": False, "normalized": False, "snapshot": None}
        assert set(random.restore) == {"rerun_s", "commands"}
        append = got["snap-append"]  # checked by the file listing, not by re-running `>>`
        assert append.verdict == {"exact": True, "normalized": True, "snapshot": True}, append.restore
        assert append.restore["probe"] == "file listing"
        assert summary["all"]["snapshot"] == 2 and summary["all"]["errors"] == 0
        with sandbox.start(tasks["snap-files"], snapshot=files.restore["snapshot"]) as s:  # an RL start
            probe = SCENARIOS["snap-files"][-1]
            assert s.run(probe, timeout=30).output == recorded["snap-files"]["steps"][-1]["output"]
    finally:
        for h in handles:
            if isinstance(h, str) and h in sandbox.list_snapshots():
                sandbox.drop_snapshot(h)
