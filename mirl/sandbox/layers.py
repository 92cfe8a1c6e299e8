"""Apply a task Dockerfile's COPY/ADD, WORKDIR, ENV and RUN lines without a Docker builder.

The bubblewrap backend builds each task's files into one overlay layer on top of the base root
filesystem, once, cached under `user_cache_dir()/bwrap/layers/<key>` where the key hashes the
Dockerfile, the build context (names, sizes, mtimes) and the base rootfs. The layer is built by
a shell script (`build_script`) run *inside* a sandbox on that overlay, so paths resolve the way
they do in the image (`/bin` is a symlink in Debian) and RUN lines see the files COPY put there.

RUN lines get no network. A line that installs packages (apt/apt-get/pip/pip3/python -m pip) is
checked against what the base already has: if everything is present, it runs with the installers
replaced by no-op shims; otherwise it is refused with a `SandboxError` naming the line, because
only the docker backend can build it. Downloads (curl/wget/ADD <url>) are refused the same way.
The FROM image is always substituted by the base rootfs.

The local backend uses `apply_to_dir`: COPY/ADD/WORKDIR into a plain temp root on the host.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import re
import shlex
import shutil
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from mirl.sandbox.base import SandboxError
from mirl.tasks import Task
from mirl.tasks import dockerfile as dockerfile_mod

log = logging.getLogger(__name__)

LAYER_FORMAT = "1"  # bump when the layer-building script changes meaning
CONTEXT_MOUNT = "/.mirl-build/context"
SHIM_DIR = "/.mirl-build/shim"
ALWAYS_PRESENT_PIP = {"pip", "setuptools", "wheel"}
INSTALLERS = ("apt-get", "apt", "pip", "pip3", "aptitude")


@dataclass
class Step:
    """One instruction with variables already substituted."""

    keyword: str  # COPY, ADD, WORKDIR, ENV, RUN
    line: int
    text: str  # the original instruction text, for messages
    workdir: str  # WORKDIR in effect
    env: dict[str, str]  # ENV in effect
    sources: list[str] = field(default_factory=list)
    dest: str = ""
    flags: dict[str, str] = field(default_factory=dict)
    command: str = ""  # RUN: a shell command line


@dataclass
class Plan:
    base_image: str
    steps: list[Step]
    workdir: str
    env: dict[str, str]


def plan(task: Task) -> Plan:
    """The steps of the task's Dockerfile's last stage, in order."""
    if task.dockerfile is None:
        return Plan(task.image or "", [], task.workdir or "/", dict(task.env))
    df = dockerfile_mod.parse(task.dockerfile)
    steps: list[Step] = []
    variables: dict[str, str] = {}
    workdir, env = "/", {}
    for ins in df.instructions:
        text = f"{ins.keyword} {ins.args}"
        scope = {**variables, **env}
        if ins.keyword == "FROM":
            steps, workdir, env = [], "/", {}  # only the last stage builds the image
        elif ins.keyword == "ARG":
            name, _, default = ins.args.partition("=")
            variables.setdefault(name.strip(), default.strip().strip('"'))
        elif ins.keyword == "ENV":
            env = {**env, **{k: dockerfile_mod.substitute(v, scope) for k, v in dockerfile_mod.parse_env(ins.args).items()}}
            steps.append(Step("ENV", ins.line, text, workdir, dict(env)))
        elif ins.keyword == "WORKDIR":
            target = dockerfile_mod.substitute(ins.args.strip().strip('"'), scope)
            workdir = _join(workdir, target)
            steps.append(Step("WORKDIR", ins.line, text, workdir, dict(env)))
        elif ins.keyword in ("COPY", "ADD"):
            sources, dest, flags = dockerfile_mod.copy_sources(ins.args)
            if "from" in flags:
                raise SandboxError(f"{_where(task, ins.line)}: `{text}` copies from another build stage; use the docker backend")
            if not sources:
                raise SandboxError(f"{_where(task, ins.line)}: `{text}` needs a source and a destination")
            sources = [dockerfile_mod.substitute(s, scope) for s in sources]
            dest = dockerfile_mod.substitute(dest, scope)
            steps.append(Step(ins.keyword, ins.line, text, workdir, dict(env), sources, dest, flags))
        elif ins.keyword == "RUN":
            form = dockerfile_mod.exec_form(ins.args)
            command = shlex.join(form) if form is not None else ins.args
            steps.append(Step("RUN", ins.line, text, workdir, dict(env), command=command))
    return Plan(df.base_image, steps, workdir, env)


def _join(base: str, path: str) -> str:
    return str(PurePosixPath(base) / path) if not path.startswith("/") else str(PurePosixPath(path))


def _where(task: Task, line: int) -> str:
    name = task.dockerfile.name if task.dockerfile else "Dockerfile"
    return f"task {task.id}: {name} line {line}"


# --- what the base already has ------------------------------------------------------------


def installed_apt(rootfs: Path) -> set[str]:
    """Package names marked installed in the rootfs's dpkg status (with their Provides)."""
    names: set[str] = set()
    try:
        text = (rootfs / "var/lib/dpkg/status").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return names
    for block in text.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): *(.*)$", block, re.M))
        if "install ok installed" not in fields.get("Status", ""):
            continue
        names.add(fields.get("Package", ""))
        for provided in fields.get("Provides", "").split(","):
            if provided.strip():
                names.add(provided.split()[0].strip())
    return names


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_pip(rootfs: Path) -> set[str]:
    """Normalised distribution and top-level module names importable by the rootfs's python3."""
    names = set(ALWAYS_PRESENT_PIP)
    for pattern in ("usr/lib/python3/dist-packages/*", "usr/lib/python3*/*", "usr/local/lib/python3*/*-packages/*"):
        for path in glob.glob(str(rootfs / pattern)):
            base = os.path.basename(path)
            if base.endswith((".dist-info", ".egg-info")):
                names.add(_norm(base.rsplit(".", 1)[0].split("-")[0]))
            elif base.endswith(".py"):
                names.add(_norm(base[:-3]))
            elif os.path.isdir(path) and not base.startswith(("_", ".")):
                names.add(_norm(base))
    return names


_SPLIT = re.compile(r"&&|\|\||;|\||\n|\$\(|`|\)")


def _segments(command: str) -> list[list[str]]:
    out = []
    for part in _SPLIT.split(command):
        try:
            words = shlex.split(part, comments=True)
        except ValueError:
            words = part.split()
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            words.pop(0)  # VAR=value prefixes
        while words and words[0] in ("sudo", "env", "exec", "time", "nohup", "then", "do", "else", "{", "("):
            words.pop(0)
        if words:
            out.append(words)
    return out


def _install_args(words: list[str]) -> tuple[str, list[str]] | None:
    """('apt'|'pip', [package args]) when the words install packages, else None."""
    tool = os.path.basename(words[0])
    rest = words[1:]
    if re.fullmatch(r"python3?(\.\d+)?", tool) and rest[:2] == ["-m", "pip"]:
        tool, rest = "pip", rest[2:]
    kind = "apt" if tool in ("apt-get", "apt", "aptitude") else "pip" if re.fullmatch(r"pip3?(\.\d+)?", tool) else None
    if kind is None or "install" not in rest:
        return None
    args = rest[rest.index("install") + 1 :]
    packages, skip_next = [], False
    for a in args:
        if skip_next:
            skip_next = False
            continue
        if a in ("-r", "--requirement", "-e", "--editable", "-c", "--constraint"):
            packages.append(a)  # cannot be checked: refused below
            skip_next = True
            continue
        if a.startswith("-"):
            if a in ("-t", "--target", "-i", "--index-url", "--extra-index-url", "-o", "--option", "-f", "--find-links"):
                skip_next = True
            continue
        packages.append(a)
    return kind, packages


def check_run(step: Step, apt: set[str], pip: set[str], task: Task) -> bool:
    """True when the RUN line installs only what the base has (run it with shims); raise if it needs more."""
    needs_shim = False
    for words in _segments(step.command):
        tool = os.path.basename(words[0])
        if tool in ("curl", "wget") and any(re.match(r"(https?|ftp)://", w) for w in words):
            raise SandboxError(
                f"{_where(task, step.line)}: `{step.text[:120]}` downloads files, which the bwrap backend cannot do "
                "(no network while building); use the docker backend (--sandbox docker)"
            )
        if tool in INSTALLERS and len(words) > 1 and words[1] in ("update", "upgrade", "clean", "autoremove", "autoclean"):
            needs_shim = True
            continue
        found = _install_args(words)
        if found is None:
            continue
        kind, packages = found
        have = apt if kind == "apt" else pip
        missing = []
        for p in packages:
            if p.startswith("-"):
                missing.append(f"{p} <file>")
                continue
            name = re.split(r"[=<>!~;\[ ]", p.split(":")[0] if kind == "apt" else p)[0]
            if (name if kind == "apt" else _norm(name)) not in have:
                missing.append(p)
        if missing:
            raise SandboxError(
                f"{_where(task, step.line)}: `{step.text[:120]}` installs {kind} packages the base root filesystem "
                f"lacks ({', '.join(missing[:8])}); the bwrap backend cannot install packages, use the docker backend "
                "(--sandbox docker) or add them to the base image"
            )
        needs_shim = True
    return needs_shim


# --- the layer -----------------------------------------------------------------------------


def layer_key(task: Task, rootfs: Path) -> str:
    """Content key of the task's layer: Dockerfile text, context file stats, base rootfs identity."""
    h = hashlib.sha256(f"format {LAYER_FORMAT}\n".encode())
    status = rootfs / "var/lib/dpkg/status"
    try:
        st = status.stat()
        h.update(f"rootfs {rootfs} {st.st_size} {st.st_mtime_ns}\n".encode())
    except OSError:
        h.update(f"rootfs {rootfs}\n".encode())
    if task.dockerfile is None:
        h.update(f"image {task.image} workdir {task.workdir}\n".encode())
        return h.hexdigest()[:24]
    h.update(task.dockerfile.read_bytes())
    ctx = task.dockerfile.parent
    for dirpath, dirnames, filenames in os.walk(ctx):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            try:
                st = p.lstat()
            except OSError:
                continue
            h.update(f"{p.relative_to(ctx)} {st.st_size} {st.st_mtime_ns} {st.st_mode}\n".encode())
    return h.hexdigest()[:24]


def _context_sources(task: Task, step: Step) -> list[str]:
    """Sources of a COPY/ADD as paths relative to the context, globs expanded, escapes refused."""
    ctx = task.dockerfile.parent.resolve()
    out = []
    for src in step.sources:
        if step.keyword == "ADD" and re.match(r"[a-z]+://", src):
            raise SandboxError(
                f"{_where(task, step.line)}: `{step.text[:120]}` downloads {src}; the bwrap backend has no network "
                "while building, use the docker backend (--sandbox docker)"
            )
        matches = sorted(glob.glob(str(ctx / src.lstrip("/")))) if any(c in src for c in "*?[") else [str(ctx / src.lstrip("/"))]
        if not matches or not all(os.path.lexists(m) for m in matches):
            raise SandboxError(f"{_where(task, step.line)}: `{step.text[:120]}`: {src} not found in the build context {ctx}")
        for m in matches:
            rel = os.path.relpath(os.path.realpath(m), ctx)
            if rel.startswith(".."):
                raise SandboxError(f"{_where(task, step.line)}: {src} lies outside the build context")
            out.append(rel)
    return out


def _copy_lines(task: Task, step: Step) -> list[str]:
    q = shlex.quote
    sources = _context_sources(task, step)
    dest = _join(step.workdir, step.dest)
    as_dir = step.dest.endswith("/") or len(sources) > 1
    ctx = task.dockerfile.parent.resolve()
    lines, targets = [], []
    for rel in sources:
        src = f"{CONTEXT_MOUNT}/{rel}" if rel != "." else CONTEXT_MOUNT
        host = ctx / rel
        if host.is_dir():
            lines.append(f"mkdir -p {q(dest)} && cp -R --preserve=mode,timestamps {q(src)}/. {q(dest)}/")
            targets.append(dest)
        elif step.keyword == "ADD" and tarfile.is_tarfile(host):
            lines.append(f"mkdir -p {q(dest)} && tar -xf {q(src)} -C {q(dest)} --no-same-owner")
            targets.append(dest)
        else:
            name = os.path.basename(rel)
            copy = "cp --preserve=mode,timestamps"
            lines.append(
                f"if [ -d {q(dest)} ] || {str(as_dir).lower()}; then mkdir -p {q(dest)} && {copy} {q(src)} {q(dest)}/{q(name)}; "
                f"else mkdir -p \"$(dirname {q(dest)})\" && {copy} {q(src)} {q(dest)}; fi"
            )
            targets.append(dest)
    for flag, cmd in (("chown", "chown -R"), ("chmod", "chmod -R")):
        if step.flags.get(flag):
            lines += [f"{cmd} {q(step.flags[flag])} {q(t)}" for t in targets]
    return lines


SHIM = '#!/bin/sh\necho "mirl: skipped \\`$(basename "$0") $*\\` (the base root filesystem has these packages)" >&2\n'


def build_script(task: Task, p: Plan, apt: set[str], pip: set[str]) -> str:
    """A bash script that, run as root inside the overlay, lays the task's image layer down."""
    q = shlex.quote
    lines = ["set -e", "umask 022", "cd /"]
    lines.append(f"mkdir -p {SHIM_DIR}")
    for tool in INSTALLERS:
        lines.append(f"printf %s {q(SHIM)} > {SHIM_DIR}/{tool} && chmod +x {SHIM_DIR}/{tool}")
    for step in p.steps:
        lines.append(f": ---- line {step.line}")
        if step.keyword == "WORKDIR":
            lines.append(f"mkdir -p {q(step.workdir)}")
        elif step.keyword in ("COPY", "ADD"):
            lines += _copy_lines(task, step)
        elif step.keyword == "RUN":
            shim = check_run(step, apt, pip, task)
            path = step.env.get("PATH", DEFAULT_PATH)
            env = " ".join(f"{q(k)}={q(v)}" for k, v in {**step.env, "PATH": (f"{SHIM_DIR}:" if shim else "") + path}.items())
            lines.append(f"mkdir -p {q(step.workdir)}")
            lines.append(
                f"(cd {q(step.workdir)} && env -i HOME=/root {env} /bin/sh -c {q(step.command)}) "
                f"|| {{ echo \"mirl: Dockerfile line {step.line} failed with exit code $?\" >&2; exit 97; }}"
            )
    lines.append(f"mkdir -p {q(p.workdir)} /logs/verifier /logs/agent /tmp && chmod 1777 /tmp")
    return "\n".join(lines) + "\n"


DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# --- plain directories (local backend) ----------------------------------------------------


def apply_to_dir(task: Task, root: Path) -> tuple[Plan, list[Step], list[str]]:
    """Lay COPY/ADD/WORKDIR of the task into `root` (a plain directory standing for `/`).

    Returns the plan, the RUN steps (not run here) and the absolute destinations written, which
    the local backend binds over the host's paths.
    """
    p = plan(task)
    written: list[str] = []
    for step in p.steps:
        if step.keyword == "WORKDIR":
            (root / step.workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
        elif step.keyword in ("COPY", "ADD"):
            ctx = task.dockerfile.parent.resolve()
            sources = _context_sources(task, step)
            dest = _join(step.workdir, step.dest)
            as_dir = step.dest.endswith("/") or len(sources) > 1
            target = root / dest.lstrip("/")
            for rel in sources:
                host = ctx / rel
                if host.is_dir():
                    shutil.copytree(host, target, dirs_exist_ok=True, symlinks=True)
                elif step.keyword == "ADD" and tarfile.is_tarfile(host):
                    target.mkdir(parents=True, exist_ok=True)
                    with tarfile.open(host) as tf:
                        tf.extractall(target, filter="data")
                elif as_dir or target.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(host, target / host.name)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(host, target)
            written.append(dest)
    (root / p.workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return p, [s for s in p.steps if s.keyword == "RUN"], written
