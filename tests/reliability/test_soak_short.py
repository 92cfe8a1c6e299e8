"""The soak of benchmarks/soak.py in its short form: 16 parallel scripted episodes per confining
backend (docker, bwrap) leave no container, temp dir, cgroup, mount, process or file descriptor
behind, and every one of them is verified with reward 1. The local backend is not soaked: it
confines nothing (throwaway machines only). The long soak, with its episodes/min, is
`python benchmarks/soak.py`.
"""

from __future__ import annotations

import shutil

import pytest

from benchmarks import soak as soak_bench

pytestmark = pytest.mark.timeout(300)

EPISODES, WORKERS = 16, 4


@pytest.mark.parametrize("backend", ["docker", "bwrap"])
def test_short_soak_leaves_nothing_behind(backend, request, tmp_path):
    request.getfixturevalue("docker_sandbox" if backend == "docker" else "bwrap_sandbox")  # missing() when absent
    r = soak_bench.soak(backend, EPISODES, WORKERS, root=tmp_path)
    print(r.line())
    assert r.errors == [] and r.rewards == {"1.0": EPISODES}, r.errors[:3]
    assert r.leaks == {}


def test_the_soak_reports_a_leak(bwrap_sandbox, monkeypatch, tmp_path):
    """The census the soak diffs sees sessions that are not cleaned up (here: temp dirs kept)."""
    from mirl.sandbox import bwrap_backend

    kept = []

    def close_keeping_the_dir(self):
        self.box.close()
        kept.append(self.tmp)

    monkeypatch.setattr(bwrap_backend.BwrapSession, "close", close_keeping_the_dir)
    monkeypatch.setattr(bwrap_backend.BwrapSession, "__del__", lambda self: None)
    try:
        r = soak_bench.soak("bwrap", 3, 1, root=tmp_path)
    finally:
        for d in kept:
            shutil.rmtree(d, ignore_errors=True)
    assert r.leaks.get("temp_dirs") == sorted(str(d) for d in kept[1:])  # the first is the warm-up's
    assert len(kept) == 4 and r.leak_count == 3
