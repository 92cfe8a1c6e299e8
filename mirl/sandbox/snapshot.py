"""Sandbox snapshots: a session's files saved so that fresh sessions start from them, not from a rerun.

`handle = session.snapshot()` saves what the commands did to the filesystem so far and returns a
string that stays valid after the session (and the process) ends; `sandbox.start(task,
snapshot=handle)` starts a fresh session whose filesystem is that state, everything else as a
normal start. Docker: the container committed to a local image (the handle is its tag). Bwrap:
the overlay's writable upper directory copied under `user_cache_dir()/snapshots/bwrap/` (the
handle is that directory) and copied back as the new session's upper directory.

What a snapshot holds: every file and directory the commands created, changed or deleted
(deletions as overlay whiteouts), with contents, modes, owners, links and extended attributes,
anywhere in the sandbox's filesystem (/app, /etc, /root, /tmp...). On docker, the files the
engine mounts over the image (/etc/hosts, /etc/hostname, /etc/resolv.conf) are saved beside the
image when a command wrote to them, and written back on restore. Nothing else needs saving:
each command is a fresh shell, so a session keeps no working directory or environment between
commands.

What it cannot hold: running processes (services, background jobs a prefix started, and
whatever they hold only in memory), and in-memory filesystems (/dev/shm, /proc, /sys). Callers
rerun prefixes that start processes instead (see `mirl.prefixes.stage.starts_processes`).

Lifetime: a snapshot outlives its session on purpose (RL starts use it in later runs), so no
owner sweep deletes a finished one; `sandbox.drop_snapshot(handle)` does, and
`sandbox.prune_snapshots(keep)` drops every snapshot of the backend not in `keep`. A save that
a killed run left half-written is swept by its owner (see `mirl.sandbox.owner`).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from mirl.sandbox.base import SandboxError, user_cache_dir

LABEL = "mirl.snapshot"  # docker: the image label holding the snapshot's metadata
REPOSITORY = "mirl-snapshot"  # docker: snapshot images are tagged mirl-snapshot-<task>:<id>
META = "snapshot.json"  # bwrap: the metadata file beside the saved upper directory


def snapshots_dir(backend: str) -> Path:
    return Path(user_cache_dir()) / "snapshots" / backend


def encode_meta(meta: dict[str, Any]) -> str:
    """Metadata as one token that every engine's LABEL parser keeps intact (no spaces or quotes)."""
    return base64.urlsafe_b64encode(json.dumps(meta, sort_keys=True).encode()).decode().rstrip("=")


def decode_meta(token: str) -> dict[str, Any] | None:
    try:
        meta = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, TypeError):
        return None
    return meta if isinstance(meta, dict) else None


def unknown(handle: Any, backend: str, why: str) -> SandboxError:
    return SandboxError(f"unknown snapshot {handle!r} for the {backend} backend: {why}")


def check_task(meta: dict[str, Any], handle: str, backend: str, task_id: str) -> None:
    """A snapshot restores only the task it was taken of (its files lie over that task's image)."""
    if meta.get("task") != task_id:
        raise SandboxError(f"snapshot {handle!r} ({backend}) was taken of task {meta.get('task')!r}, "
                           f"not of {task_id!r}: start it with its own task")
