"""The containers' disk watch: what it counts, and how often it may walk a tree."""

from __future__ import annotations

from mirl.sandbox import disk_watch
from mirl.sandbox.disk_watch import DiskWatch, allocated_bytes


def test_allocated_bytes_count_written_blocks_not_sparse_holes(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data").write_bytes(b"x" * (2 << 20))
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(1 << 30)  # 1 GiB apparent, nothing allocated
    n = allocated_bytes(tmp_path)
    assert 2 << 20 <= n < 3 << 20


def test_over_says_past_the_bound_and_spaces_its_walks(tmp_path, monkeypatch):
    (tmp_path / "data").write_bytes(b"x" * (2 << 20))
    assert DiskWatch(tmp_path, 1).over() and not DiskWatch(tmp_path, 4).over()
    clock = iter([0.0, 0.05, 0.1, 0.4, 0.6])  # the walk takes 0.05 s: no next one before 0.5 s
    monkeypatch.setattr(disk_watch.time, "monotonic", lambda: next(clock))
    walks = []
    real = disk_watch.allocated_bytes
    monkeypatch.setattr(disk_watch, "allocated_bytes", lambda *a: walks.append(1) or real(*a))
    w = DiskWatch(tmp_path, 1)
    assert w.over()  # walks at 0.0 (took 0.05)
    assert not w.over() and not w.over()  # 0.1 and 0.4: too soon, no walk
    assert len(walks) == 1
