"""Host-side process helpers: output collection, tree killing, pipe draining, output capping."""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import pytest

from mirl.sandbox import process
from mirl.sandbox.base import HeadTailBuffer
from mirl.sandbox.process import Drainer, collect, kill_tree, marked_pids, marker_token, start_ticks

pytestmark = pytest.mark.timeout(60)


def _start(command: str, env: dict | None = None):
    r, w = os.pipe()
    proc = subprocess.Popen(["bash", "-c", command], stdout=w, stderr=w, stdin=subprocess.DEVNULL,
                            start_new_session=True, env={"PATH": os.environ["PATH"], **(env or {})})
    os.close(w)
    return proc, r, os.pidfd_open(proc.pid)


def test_collect_returns_when_the_shell_exits_though_a_child_holds_the_pipe():
    proc, r, pidfd = _start("sleep 30 & echo done")
    buf = HeadTailBuffer(1000)
    t0 = time.monotonic()
    code = collect(r, buf, time.monotonic() + 20, pidfd, proc.poll)
    assert code == 0 and buf.text() == "done\n" and time.monotonic() - t0 < 15  # not the deadline, not the sleep
    kill_tree([], [proc.pid])
    os.close(r)


def test_collect_gives_up_at_the_deadline():
    proc, r, pidfd = _start("echo first; sleep 30")
    buf = HeadTailBuffer(1000)
    t0 = time.monotonic()
    assert collect(r, buf, time.monotonic() + 0.5, pidfd, proc.poll) is None
    assert 0.5 <= time.monotonic() - t0 < 15 and buf.text() == "first\n"  # gave up long before the sleep ends
    kill_tree([], [proc.pid])
    proc.wait(5)
    os.close(r)


def test_kill_tree_finds_children_that_left_the_session_by_marker():
    marker = uuid.uuid4().hex
    proc, r, _ = _start("setsid sleep 301 & sleep 302 & wait", env={"MIRL_CMD": marker})
    token = marker_token("MIRL_CMD", marker)
    deadline = time.monotonic() + 5
    while len(marked_pids([token])) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(marked_pids([token])) == 3
    assert kill_tree([token]) == 3
    proc.wait(5)
    time.sleep(0.1)
    assert marked_pids([token]) == []
    os.close(r)


def test_a_scan_since_a_start_passes_over_older_processes_and_finds_newer_ones():
    """`since` (a session's first runner's start) spares the environ reads of every process older than the
    session; the session's own processes all start later and are found."""
    marker = uuid.uuid4().hex
    token = marker_token("MIRL_CMD", marker)
    old, r1, _ = _start("sleep 303", env={"MIRL_CMD": marker})
    time.sleep(0.1)  # start times count in clock ticks (10 ms)
    new, r2, _ = _start("sleep 304", env={"MIRL_CMD": marker})
    try:
        since = start_ticks(new.pid)
        assert since is not None and start_ticks(old.pid) < since
        deadline = time.monotonic() + 5
        while len(marked_pids([token])) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(marked_pids([token])) == sorted([old.pid, new.pid])
        assert marked_pids([token], since=since) == [new.pid]
        assert kill_tree([token], since=since) == 1
        new.wait(5)
        assert old.poll() is None
    finally:
        kill_tree([token])
        old.wait(5)
        os.close(r1)
        os.close(r2)
    assert start_ticks(old.pid) is None


def test_killing_when_nothing_is_marked_scans_proc_once(monkeypatch):
    """A session's close with nothing left running: one scan of /proc, not the sweep and the final check."""
    scans = []
    real = process.marked_pids
    monkeypatch.setattr(process, "marked_pids", lambda *a, **k: scans.append(1) or real(*a, **k))
    assert kill_tree([marker_token("MIRL_CMD", uuid.uuid4().hex)]) == 0
    assert len(scans) == 1


def test_drainer_keeps_a_writer_alive_after_we_stop_reading(tmp_path):
    done = tmp_path / "done"
    proc, r, _ = _start(f"for i in $(seq 2000); do echo line $i; done; touch {done}")
    Drainer.shared().adopt(r)  # without a reader the writer would block on a full pipe forever
    proc.wait(20)
    assert proc.returncode == 0 and done.exists()


def test_head_tail_buffer_keeps_both_ends_of_a_flood():
    buf = HeadTailBuffer(100)
    buf.feed(b"HEAD" + b"x" * 10_000)
    for _ in range(50):
        buf.feed(b"y" * 100_000)
    buf.feed(b"TAIL")
    total = 4 + 10_000 + 5_000_000 + 4
    assert buf.total == total and buf.truncated
    assert buf.text() == "HEAD" + "x" * 46 + f"\n[... {total - 100} bytes of output elided ...]\n" + "y" * 46 + "TAIL"


def test_head_tail_buffer_keeps_small_output_whole():
    buf = HeadTailBuffer(100)
    for part in (b"a" * 30, b"b" * 40, b"c" * 30):
        buf.feed(part)
    assert buf.text() == "a" * 30 + "b" * 40 + "c" * 30 and not buf.truncated


def test_head_tail_buffer_keeps_a_character_across_its_seam_whole():
    text = "x" + "€" * 30  # 91 bytes: a 3-byte character straddles byte 50, where the head ends
    buf = HeadTailBuffer(100)
    buf.feed(text.encode())
    assert not buf.truncated and buf.text() == text


def test_head_tail_buffer_elides_what_fits_neither_end():
    buf = HeadTailBuffer(100)
    for part in (b"a" * 50, b"b" * 30, b"c" * 40):  # 120 bytes: 20 b's fit neither the head nor the tail
        buf.feed(part)
    assert buf.truncated and buf.total == 120
    assert buf.text() == "a" * 50 + "\n[... 20 bytes of output elided ...]\n" + "b" * 10 + "c" * 40


def test_owner_is_gone_only_when_its_process_ended_here():
    from mirl.sandbox.owner import owner_gone, owner_id

    proc = subprocess.Popen(["sleep", "30"])
    alive = owner_id(proc.pid)
    assert not owner_gone(alive) and not owner_gone(owner_id())
    proc.kill()
    proc.wait()
    assert owner_gone(alive)  # same pid namespace and boot, the process ended
    boot, rest = alive.split(".", 1)
    assert not owner_gone(f"{'0' * len(boot)}.{rest}")  # another machine's (or boot's) owner: left alone
    assert not owner_gone("not an owner")


def test_a_cgroup_v2_session_group_kills_its_processes_at_once_daemons_included(tmp_path):
    """Where the host has cgroup v2 alone (no v1 pids controller), a session's processes are held in a
    group under this process's own and killed with one write to `cgroup.kill`: a daemon that left its
    parent's session and process group dies too, with no scan of /proc."""
    from sandbox_helpers import cgroup2_hierarchy, host_pids_with, wait_until_gone

    from mirl.sandbox.process import SessionCgroup

    token = f"MIRL_V2_{uuid.uuid4().hex}=1"
    with cgroup2_hierarchy(tmp_path / "cg2") as root:
        group = SessionCgroup.create("mirl-test", mount=root)
        assert group is not None and group.path.parent == SessionCgroup.base(root)
        shell = subprocess.Popen(["sh", "-c", "read go || exit 1; setsid sh -c 'sleep 300 & sleep 300' & sleep 300 & wait"],
                                 stdin=subprocess.PIPE, env={**os.environ, token.split("=")[0]: "1"})
        try:
            (group.path / "cgroup.procs").write_text(str(shell.pid))  # joined before it forks anything
            shell.stdin.write(b"go\n")
            shell.stdin.flush()
            deadline = time.monotonic() + 5
            while len(host_pids_with(token)) < 5 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(host_pids_with(token)) == 5 and sorted(group.pids()) == sorted(host_pids_with(token))
            (group.path / "inner").mkdir()  # a group a command made inside the session's: removed with it
            assert group.remove() and not group.path.exists()
            shell.wait(5)
            assert wait_until_gone(token) == []
        finally:
            shell.kill()


def test_a_cgroup_v2_group_whose_owner_died_is_swept(tmp_path):
    from sandbox_helpers import cgroup2_hierarchy

    from mirl.sandbox.owner import owner_id
    from mirl.sandbox.process import SessionCgroup

    with cgroup2_hierarchy(tmp_path / "cg2") as root:
        base = SessionCgroup.base(root)
        dead = subprocess.Popen(["true"])
        gone = owner_id(dead.pid)
        dead.wait()
        (base / f"mirl-local-old_{gone.rsplit('.', 1)[0]}.0").mkdir()  # a start time no process has now
        mine = SessionCgroup.create("mirl-local-mine", mount=root)
        assert SessionCgroup.sweep_stale(mount=root) == 1
        assert mine.path.exists() and not (base / f"mirl-local-old_{gone.rsplit('.', 1)[0]}.0").exists()
        assert mine.remove()
