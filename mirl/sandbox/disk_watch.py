"""A disk bound for containers on hosts without overlay quotas: watch the container's upper directory.

An engine's overlay storage on an ordinary host filesystem cannot cap a container's disk use
(`--storage-opt size` needs XFS project quotas). Two things bound it instead: RLIMIT_FSIZE at the task's
`storage_mb` (no single file, `fallocate` included, can pass it: the write fails with EFBIG) and, while
a command runs, a check of the upper directory's allocated bytes every `POLL_S`: past `storage_mb`, the
command is stopped. The bound is therefore storage_mb plus what one poll interval (longer for trees
so large that walking them takes time) lets through, not exact; bwrap sessions get an exact one (`mirl.sandbox.loop_disk`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

POLL_S = 0.2


def allocated_bytes(root: Path, stop_above: int | None = None) -> int:
    """Bytes allocated to the files under `root` (sparse holes do not count); stops counting once past
    `stop_above`. Files that vanish while it walks are skipped."""
    total, stack = 0, [str(root)]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
        if stop_above is not None and total > stop_above:
            return total
    return total


class DiskWatch:
    """The upper directory of one container and its bound; `over()` says whether it is past it.

    A walk of a large tree (a pip install: thousands of files) costs real CPU, so walks are spaced
    to at most a tenth of one core: the next comes no sooner than nine times the last one's length."""

    WALK_SHARE = 0.1

    def __init__(self, upper: Path, limit_mb: int):
        self.upper, self.limit = upper, int(limit_mb) << 20
        self._next = 0.0

    def over(self) -> bool:
        start = time.monotonic()
        if start < self._next:
            return False
        past = allocated_bytes(self.upper, self.limit) > self.limit
        took = time.monotonic() - start
        self._next = start + took / self.WALK_SHARE
        return past

    def note(self) -> str:
        return (f"\n[sandbox: the command was stopped: the session's files passed the task's storage_mb "
                f"({self.limit >> 20} MB)]\n")
