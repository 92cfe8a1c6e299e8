"""Moving files into a running session through `Session.run` alone, so every backend gets it free.

Used for the oracle's `solution/` and other small payloads: the directory is tarred, base64-encoded
and written in chunks that stay far below the kernel's 128 KiB limit on one argument.
"""

from __future__ import annotations

import base64
import io
import shlex
import tarfile
import uuid
from pathlib import Path

from mirl.sandbox.base import SandboxError, Session

CHUNK = 64_000  # characters of base64 per command


def upload_dir(session: Session, local_dir: Path, dest: str, timeout: float = 60.0) -> None:
    """Copy `local_dir`'s contents to `dest` inside the session (created if needed)."""
    local_dir = Path(local_dir)
    upload(session, {str(p.relative_to(local_dir)): p for p in sorted(local_dir.rglob("*"))}, dest, timeout)


def upload(session: Session, files: dict[str, Path], dest: str, timeout: float = 60.0) -> None:
    """Copy local paths to `dest/<name>` inside the session; `files` maps names to local paths."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, path in files.items():
            tar.add(path, arcname=name, recursive=False)
    payload = base64.b64encode(buf.getvalue()).decode()
    staging = f"/tmp/.mirl-upload-{uuid.uuid4().hex}.b64"
    q_staging, q_dest = shlex.quote(staging), shlex.quote(dest)
    first = True
    for start in range(0, max(len(payload), 1), CHUNK):
        chunk = payload[start : start + CHUNK]
        op = ">" if first else ">>"
        result = session.run(f"printf %s {shlex.quote(chunk)} {op} {q_staging}", timeout=timeout)
        if result.exit_code != 0:
            raise SandboxError(f"upload to {dest} failed: {result.output[-500:]}")
        first = False
    result = session.run(
        f"mkdir -p {q_dest} && base64 -d {q_staging} | tar -xz -C {q_dest} && rm -f {q_staging}", timeout=timeout
    )
    if result.exit_code != 0:
        raise SandboxError(f"upload to {dest} failed: {result.output[-500:]}")
