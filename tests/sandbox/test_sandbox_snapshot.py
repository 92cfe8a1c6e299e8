"""Snapshots on the real docker (podman) and bwrap backends: a session started from a snapshot sees
the files the prefix left (created, changed, deleted, modes, owners, outside /app), nothing more,
and the task's own image or layer stays as it was. Restore and save speed: benchmarks/prefix_restore.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mirl.sandbox.base import SandboxError
from mirl.sandbox.snapshot import LABEL, decode_meta

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DOCKERFILE = "FROM mirl-base\nWORKDIR /app\nCOPY data.txt /app/data.txt\nCOPY gone.txt /app/gone.txt\n"
FILES = {"data.txt": "line one\nline two\n", "gone.txt": "to be deleted\n"}
PREFIX = [
    "echo one > a.txt && chmod 751 a.txt",  # a new file with an unusual mode
    "sed -i 's/two/2/' data.txt",  # a task file changed
    "rm gone.txt",  # a task file deleted (a whiteout on the overlay)
    "mkdir -p new/dir && echo deep > new/dir/f && chown 1234:4321 new/dir/f",  # a new directory, an owner
    "echo conf > /etc/mirl-probe.conf && echo secret > /root/.probe",  # outside /app
    "rm -rf /etc/skel && mkdir /etc/skel && echo only > /etc/skel/new",  # a base directory replaced (opaque)
    "echo '10.9.8.7 db.internal' >> /etc/hosts",  # on docker a file the engine mounts, not in a commit
]
# the next command: it reads everything the prefix did and changes a file itself
NEXT = ("echo later >> a.txt; cat a.txt data.txt new/dir/f /etc/mirl-probe.conf /root/.probe; "
        "stat -c '%a %u:%g %n' a.txt new/dir/f; ls; ls -A /etc/skel; grep db.internal /etc/hosts")
NEXT_OUTPUT = ("one\nlater\nline one\nline 2\ndeep\nconf\nsecret\n751 0:0 a.txt\n644 1234:4321 new/dir/f\n"
               "a.txt\ndata.txt\nnew\nnew\n10.9.8.7 db.internal\n")
FRESH = "ls; cat data.txt; ls -A /etc/skel; cat /etc/mirl-probe.conf /root/.probe 2>&1; cat /etc/hosts 2>/dev/null | grep -c db.internal"
FRESH_OUTPUT = ("data.txt\ngone.txt\nline one\nline two\n.bash_logout\n.bashrc\n.profile\n"
                "cat: /etc/mirl-probe.conf: No such file or directory\ncat: /root/.probe: No such file or directory\n0\n")


@pytest.fixture(params=["docker", "bwrap"])
def sandbox(request):
    return request.getfixturevalue(f"{request.param}_sandbox")


@pytest.fixture
def task(task_factory):
    return task_factory("snapshot-probe", dockerfile=DOCKERFILE, files=FILES)


@pytest.fixture
def handles(sandbox):
    """Snapshots a test takes; those it did not drop itself are dropped after it."""
    taken: list[str] = []
    yield taken
    for h in taken:
        if h in sandbox.list_snapshots():
            sandbox.drop_snapshot(h)


def run_all(session, commands: list[str]) -> None:
    for c in commands:
        r = session.run(c, timeout=60)
        assert r.exit_code == 0, f"{c!r}: {r.output}"


def test_restore_reproduces_the_next_command_and_leaves_the_image_alone(sandbox, task, handles):
    with sandbox.start(task) as s:
        run_all(s, PREFIX)
        handles.append(s.snapshot())
        recorded = s.run(NEXT, timeout=60)
    assert (recorded.exit_code, recorded.output) == (0, NEXT_OUTPUT)
    with sandbox.start(task, snapshot=handles[0]) as restored:
        again = restored.run(NEXT, timeout=60)
        assert (again.exit_code, again.output) == (recorded.exit_code, recorded.output)
        assert restored.run("test -e gone.txt || echo deleted").output == "deleted\n"
        handles.append(restored.snapshot())  # a snapshot of a restored session holds both sessions' changes
    with sandbox.start(task, snapshot=handles[1]) as chained:
        assert chained.run("cat a.txt; test -e gone.txt || echo deleted; ls -A /etc/skel").output == "one\nlater\ndeleted\nnew\n"
    with sandbox.start(task) as fresh:  # the task's image (docker) or layer and rootfs (bwrap) are untouched
        assert fresh.run(FRESH, timeout=60).output == FRESH_OUTPUT


def test_sessions_from_one_snapshot_are_independent(sandbox, task, handles):
    with sandbox.start(task) as s:
        run_all(s, PREFIX[:1])
        handles.append(s.snapshot())
        s.run("echo after-the-snapshot >> a.txt")
    with sandbox.start(task, snapshot=handles[0]) as first, sandbox.start(task, snapshot=handles[0]) as second:
        assert first.run("echo first >> a.txt; cat a.txt").output == "one\nfirst\n"
        assert second.run("cat a.txt").output == "one\n"  # neither the original nor a sibling leaks in
    with sandbox.start(task, snapshot=handles[0]) as third:
        assert third.run("cat a.txt").output == "one\n"


def test_running_processes_are_not_in_a_snapshot(sandbox, task, handles):
    count = "cat /proc/[0-9]*/comm 2>/dev/null | grep -cx sleep"
    with sandbox.start(task) as s:
        run_all(s, ["(sleep 300 &) ; echo started > started.txt"])
        assert s.run(count).output == "1\n"
        handles.append(s.snapshot())
    with sandbox.start(task, snapshot=handles[0]) as restored:
        assert restored.run(f"cat started.txt; {count}").output == "started\n0\n"  # the file, not the process


def test_bad_handles_are_clear_errors(sandbox, task, task_factory, handles, tmp_path):
    for bad in ("nonsense", "mirl-snapshot-nothing:0123456789ab", str(tmp_path), "/no/such/dir", ""):
        with pytest.raises(SandboxError, match=re.escape(f"unknown snapshot {bad!r} for the {sandbox.name} backend")):
            sandbox.start(task, snapshot=bad)
    other = task_factory("snapshot-other", dockerfile=DOCKERFILE, files=FILES)
    with sandbox.start(other) as s:
        handles.append(s.snapshot())
    with pytest.raises(SandboxError, match="was taken of task 'snapshot-other', not of 'snapshot-probe'"):
        sandbox.start(task, snapshot=handles[0])


def test_drop_and_prune(sandbox, task, handles):
    with sandbox.start(task) as s:
        run_all(s, PREFIX[:1])
        handles += [s.snapshot(), s.snapshot(), s.snapshot()]
    assert set(handles) <= set(sandbox.list_snapshots(task.id)) and len(set(handles)) == 3
    sandbox.drop_snapshot(handles[0])
    assert handles[0] not in sandbox.list_snapshots()
    with pytest.raises(SandboxError, match="unknown snapshot"):
        sandbox.start(task, snapshot=handles[0])
    with pytest.raises(SandboxError, match="unknown snapshot"):
        sandbox.drop_snapshot(handles[0])
    if sandbox.name == "bwrap":
        assert not Path(handles[0]).exists()
    else:
        with pytest.raises(Exception, match="[Nn]o such image|not found|Not Found"):
            sandbox.client.images.get(handles[0])
    dropped = sandbox.prune_snapshots(keep=[handles[1]], task=task.id)
    assert handles[2] in dropped and handles[1] not in dropped
    assert handles[1] in sandbox.list_snapshots(task.id) and handles[2] not in sandbox.list_snapshots()
    with sandbox.start(task, snapshot=handles[1]) as kept:
        if sandbox.name == "docker":  # the container runs on the image: refused until the session ends
            with pytest.raises(SandboxError, match="close the sessions started from it first"):
                sandbox.drop_snapshot(handles[1])
        else:  # the session holds its own copy
            sandbox.drop_snapshot(handles[1])
        assert kept.run("cat a.txt").output == "one\n"
    assert (handles[1] in sandbox.list_snapshots()) == (sandbox.name == "docker")


@pytest.mark.podman
def test_docker_keeps_engine_mounted_files_only_when_written(docker_sandbox, task, task_factory):
    def meta(handle: str) -> dict:
        return decode_meta(docker_sandbox.client.images.get(handle).labels[LABEL])

    taken = []
    try:
        with docker_sandbox.start(task) as s:
            taken.append(s.snapshot())  # /etc/hosts untouched: the new container's own is kept
            run_all(s, [PREFIX[-1]])
            taken.append(s.snapshot())
        assert meta(taken[0])["mounted"] == {} and list(meta(taken[1])["mounted"]) == ["/etc/hosts"]
        with docker_sandbox.start(task, snapshot=taken[0]) as s:
            assert s.run("grep -c db.internal /etc/hosts").output == "0\n"
        # an image that is not a snapshot, under a snapshot's name
        docker_sandbox.client.images.get(docker_sandbox.config.base_image).tag("mirl-snapshot-fake", "notasnapshot")
        taken.append("mirl-snapshot-fake:notasnapshot")
        with pytest.raises(SandboxError, match=f"no {LABEL} label: it is not a snapshot"):
            docker_sandbox.start(task, snapshot=taken[-1])
    finally:
        for h in taken:
            docker_sandbox.client.images.remove(h)


@pytest.mark.bwrap
def test_bwrap_refuses_a_snapshot_over_other_lowers_and_sweeps_half_saves(bwrap_sandbox, task, monkeypatch):
    from mirl.sandbox import bwrap_backend
    from mirl.sandbox.owner import owner_id
    from mirl.sandbox.snapshot import META, snapshots_dir

    with bwrap_sandbox.start(task) as s:
        handle = s.snapshot()
    try:
        meta_path = Path(handle) / META
        meta = json.loads(meta_path.read_text())
        meta_path.write_text(json.dumps({**meta, "lowers": ["/elsewhere"] + meta["lowers"][1:]}))
        with pytest.raises(SandboxError, match="its Dockerfile or the base rootfs changed.*take the snapshot again"):
            bwrap_sandbox.start(task, snapshot=handle)
    finally:
        bwrap_sandbox.drop_snapshot(handle)
    ended = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    dead_owner = owner_id(ended.pid)
    ended.kill()
    ended.wait()
    root = snapshots_dir("bwrap")
    dead, live = root / ".partial-sweep-test-dead", root / ".partial-sweep-test-live"
    dropped = root / ".dropped-sweep-test"  # a drop cut short between its rename and its delete
    for d, owner in ((dead, dead_owner), (live, owner_id()), (dropped, owner_id())):
        (d / "upper").mkdir(parents=True)
        (d / bwrap_backend.OWNER_FILE).write_text(owner)
        (d / META).write_text(json.dumps(meta))
    try:
        assert not {str(d) for d in (dead, live, dropped)} & set(bwrap_sandbox.list_snapshots())  # never snapshots
        monkeypatch.setattr(bwrap_backend, "_swept", False)
        bwrap_backend.sweep_stale()
        assert not dead.exists() and live.exists() and not dropped.exists()
    finally:
        for d in (dead, live, dropped):
            subprocess.run(["rm", "-rf", str(d)], check=True)


def test_local_backend_cannot_snapshot(task):
    from mirl.sandbox.local_backend import LocalSandbox

    sandbox = LocalSandbox()
    with sandbox.start(task) as s:
        assert not hasattr(s, "snapshot")  # how callers tell that a backend cannot snapshot
    with pytest.raises(SandboxError, match="the local backend cannot snapshot"):
        sandbox.start(task, snapshot="anything")
