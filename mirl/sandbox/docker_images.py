"""Task images for the Docker-API backend: build from `environment/`, cache by content, substitute FROM.

Task images are built from the task's `environment/` and cached by a content hash of the build
context (`mirl-task-<id>:<hash12>`), so the second episode of a task starts in ~0.1 s. Images named
in `FROM` that are neither local nor pullable are replaced by the local base image (see
`mirl.sandbox.image`) with a warning, because no registry is reachable on the machines we use.
`TaskImages` is the image half of `DockerSandbox`; sessions live in `mirl.sandbox.docker_backend`.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import tarfile
import tempfile
import threading
import time
from pathlib import Path

from mirl.sandbox.base import SandboxConfig, SandboxError
from mirl.tasks import Task
from mirl.tasks import dockerfile as dockerfile_mod

log = logging.getLogger(__name__)

PULL_TIMEOUT_S = 15.0
UNPULLABLE_TTL_S = 24 * 3600.0


def engine_available(start: bool = True) -> bool:
    """True when a Docker-API engine answers (DOCKER_HOST, our podman socket, docker.sock).

    With `start`, an installed podman counts: its service is started on our cache socket, so
    `--sandbox auto` gets containers on machines that have podman but no daemon running.
    """
    from mirl.sandbox.podman import ensure_service, find_engine, podman_installed

    if find_engine() is not None:
        return True
    if not start or not podman_installed():
        return False
    try:
        ensure_service()
        return True
    except SandboxError as e:
        log.warning("podman is installed but its service did not start: %s", e)
        return False


def connect(start_podman: bool = True):
    """A docker SDK client for the engine that answers, starting podman's service if allowed."""
    try:
        import docker
    except ImportError as e:  # pragma: no cover - docker is a dependency
        raise SandboxError("the docker backend needs the docker SDK: `pip install docker`") from e
    from mirl.sandbox.podman import ensure_service, find_engine

    url = ensure_service(set_env=False) if start_podman else find_engine()
    if url is None:
        raise SandboxError("no Docker-API engine answers; set DOCKER_HOST or `apt-get install podman runc`")
    return docker.DockerClient(base_url=url, timeout=600)


def safe_name(task_id: str) -> str:
    """A task id as an image repository name: lower case, [a-z0-9._-], no leading separator."""
    name = re.sub(r"[^a-z0-9._-]+", "-", task_id.lower()).strip("._-")
    name = re.sub(r"[._-]{2,}", "-", name)
    return name or "task"


def context_hash(context: Path, dockerfile_text: str, extra: str = "") -> str:
    """Content hash of a build context: paths, exec bits and bytes of every file, plus the Dockerfile."""
    h = hashlib.sha256()
    h.update(dockerfile_text.encode())
    h.update(extra.encode())
    for path in sorted(p for p in context.rglob("*")):
        rel = path.relative_to(context).as_posix()
        if path.is_symlink():
            h.update(f"L {rel} {os.readlink(path)}\n".encode())
        elif path.is_file():
            h.update(f"F {rel} {path.stat().st_mode & 0o111}\n".encode())
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        elif path.is_dir():
            h.update(f"D {rel}\n".encode())
    return h.hexdigest()


def _context_signature(task: Task) -> tuple:
    """Cheap stand-in for the content hash: paths, sizes and mtimes of the build context."""
    entries = []
    for path in sorted(task.context_dir.rglob("*")):
        try:
            st = path.lstat()
        except OSError:
            continue
        entries.append((str(path), st.st_size, st.st_mtime_ns, st.st_mode))
    st = task.dockerfile.stat()
    return (str(task.dockerfile), st.st_size, st.st_mtime_ns, tuple(entries))


def _unpullable_file() -> Path:
    from mirl.sandbox.base import user_cache_dir

    return Path(user_cache_dir()) / "docker" / "unpullable.json"


class _PullMemo:
    """Images that failed to pull, remembered on disk for a day so every run does not wait again."""

    def __init__(self):
        self._mem: dict[str, float] = {}

    def _load(self) -> dict[str, float]:
        try:
            data = json.loads(_unpullable_file().read_text())
            return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def failed_recently(self, ref: str) -> bool:
        when = self._mem.get(ref) or self._load().get(ref)
        return when is not None and time.time() - when < UNPULLABLE_TTL_S

    def remember(self, ref: str) -> None:
        self._mem[ref] = time.time()
        data = self._load()
        data[ref] = self._mem[ref]
        path = _unpullable_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)


_PULL_MEMO = _PullMemo()
_WARNED: set[str] = set()  # substitutions already reported by this process
_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.I)



class TaskImages:
    """Builds and caches the images sessions start from; needs `client`, `config` and the state below."""

    config: SandboxConfig

    def _init_images(self) -> None:
        self._lock = threading.Lock()
        self._base_checked: str | None = None
        self._built: dict[tuple, str] = {}  # context signature -> image tag built by this sandbox

    def _has_image(self, ref: str) -> bool:
        import docker

        try:
            self.client.images.get(ref)
            return True
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError:
            return False

    def _pullable(self, ref: str) -> bool:
        """Present locally, or pulled now within a short timeout; failures are remembered."""
        if self._has_image(ref):
            return True
        if _PULL_MEMO.failed_recently(ref):
            return False
        result: list[bool] = []

        def pull():
            try:
                self.client.images.pull(ref)
                result.append(True)
            except Exception as e:  # registry unreachable, unknown image, auth...
                log.debug("pull %s failed: %s", ref, e)

        worker = threading.Thread(target=pull, daemon=True)
        worker.start()
        worker.join(PULL_TIMEOUT_S)
        if result:
            return True
        _PULL_MEMO.remember(ref)
        return False

    def base_image(self) -> str:
        """The local base image, (re)imported from the rootfs when missing or out of date."""
        ref = self.config.base_image
        if self._base_checked != ref:
            import fcntl

            from mirl.sandbox import image as image_mod

            lock_path = Path(image_mod.base_dir()) / "import.lock"
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            with open(lock_path, "w") as lock:  # parallel processes import once
                fcntl.flock(lock, fcntl.LOCK_EX)
                if image_mod.image_state(self.client, ref) in ("missing", "stale"):
                    image_mod.build_rootfs()
                    log.info("importing the base image %s", ref)
                    image_mod.import_image(self.client, ref, force=True)
            self._base_checked = ref
        return ref

    def _rewrite_from(self, text: str) -> tuple[str, list[str]]:
        """Replace FROM images that cannot be had by the base image; returns (text, replaced refs)."""
        variables: dict[str, str] = {}
        stages: set[str] = set()
        replaced: list[str] = []
        lines = text.splitlines(keepends=True)
        for ins in dockerfile_mod.split_lines(text):
            if ins.keyword == "ARG" and not stages:
                name, _, default = ins.args.partition("=")
                variables.setdefault(name.strip(), default.strip().strip('"'))
            if ins.keyword != "FROM":
                continue
            m = _FROM.match(lines[ins.line - 1])
            if not m:
                continue
            raw = m.group(3)
            ref = dockerfile_mod.substitute(raw, variables)
            alias = re.search(r"\bAS\s+(\S+)", m.group(4), re.I)
            if ref.lower() not in stages and ref != "scratch" and not self._pullable(ref):
                base = self.base_image()
                if ref not in _WARNED:
                    _WARNED.add(ref)
                    log.warning("image %s cannot be pulled; building on the local base image %s instead", ref, base)
                # --platform= names the pulled image's platform; the local base image has just its own
                lines[ins.line - 1] = m.group(1) + base + m.group(4) + ("\n" if lines[ins.line - 1].endswith("\n") else "")
                replaced.append(ref)
            if alias:
                stages.add(alias.group(1).lower())
        return "".join(lines), replaced

    def image_for(self, task: Task) -> str:
        """The image a session of `task` starts from, building (and caching) it when needed."""
        with self._lock:
            if task.image:
                if self._pullable(task.image):
                    return task.image
                log.warning("image %s cannot be pulled; using the local base image instead", task.image)
                return self.base_image()
            if task.dockerfile is None:
                raise SandboxError(f"{task.id}: task has neither an image nor a Dockerfile")
            key = _context_signature(task)
            if key not in self._built:  # the hash and engine look-ups cost ~100 ms; skip them once built
                self._built[key] = self._build(task)
            return self._built[key]

    def _build(self, task: Task) -> str:
        import docker

        context = task.context_dir
        text, replaced = self._rewrite_from(task.dockerfile.read_text(encoding="utf-8", errors="replace"))
        extra = ""
        if replaced:
            extra = self.client.images.get(self.config.base_image).id  # a new base image rebuilds tasks
        digest = context_hash(context, text, extra)
        tag = f"mirl-task-{safe_name(task.id)}:{digest[:12]}"
        if self._has_image(tag):
            return tag
        started = time.monotonic()
        log.info("building %s from %s%s", tag, context, f" (FROM {', '.join(replaced)} -> {self.config.base_image})" if replaced else "")
        df_name = ".mirl.Dockerfile"
        with tempfile.TemporaryFile() as fileobj:
            with tarfile.open(fileobj=fileobj, mode="w") as tar:
                for path in sorted(context.iterdir()):
                    tar.add(path, arcname=path.name)
                data = text.encode()
                info = tarfile.TarInfo(df_name)
                info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                tar.addfile(info, io.BytesIO(data))
            fileobj.seek(0)
            lines: list[str] = []
            error = None
            try:
                for chunk in self.client.api.build(
                    fileobj=fileobj, custom_context=True, dockerfile=df_name, tag=tag, rm=True, forcerm=True,
                    pull=False, decode=True, timeout=max(60, int(task.build_timeout_s)),
                ):
                    if "stream" in chunk:
                        lines.extend(chunk["stream"].splitlines())
                        del lines[:-200]
                    if "error" in chunk:
                        error = chunk.get("error") or str(chunk.get("errorDetail"))
            except docker.errors.APIError as e:
                error = str(e)
            except Exception as e:  # read timeout of the build stream
                error = f"{type(e).__name__}: {e}"
        if error or not self._has_image(tag):
            raise SandboxError(build_failure(task.id, error or "image missing after build", lines))
        log.info("built %s in %.1f s", tag, time.monotonic() - started)
        return tag



def build_failure(task_id: str, error: str, lines: list[str]) -> str:
    """A build error with the apt/pip lines that say what went wrong, first."""
    missing = sorted({m.group(1) for line in lines for m in [re.search(r"Unable to locate package (\S+)", line)] if m})
    head = f"{task_id}: image build failed: {error.strip()}"
    if missing:
        head += f"\napt packages not found on the base image's distribution: {', '.join(missing)}"
    return head + "\n" + "\n".join(lines[-25:])
