"""Local sandboxes: plain subprocesses on the host, for throwaway machines only.

Nothing is confined: commands run as the calling user with the host's network and files. Use it
where neither a Docker-API engine nor bubblewrap exists (e.g. a rented GPU box); `auto` never
picks it. The task's COPY/ADD files are laid into a fresh temp root per session. When we are root
and `unshare` works, every command runs in a private mount namespace where that temp root's
WORKDIR, /tests, /logs and COPY targets are bind-mounted over the host paths, so tasks' absolute
paths resolve without touching the host's real directories (empty mount points may be created); a
COPY into a directory the host already fills (`COPY opt /opt`) is merged entry by entry; /tmp and
/etc are the session's own, so sessions of one task side by side do not see each other's files or
users. /etc is an overlay over the host's (the task's files and the session's writes in the upper
layer), which costs one mount; where overlayfs is not available it is a copy of the host's /etc
(0.1 to 1 s a session, more the busier the disk: /etc holds thousands of files and links). The
host's /usr, /bin, /sbin, /lib*, /boot and /opt are read-only there (`READ_ONLY`): a command cannot
change the host's programs. Nor its users' files: /root and /home are overlays there too (`SHIELDED`:
the host's files seen, a session's writes its own; read-only where overlayfs is not available), and the
directories the kit runs from (its working directory, HOME, code and Python) are read-only (a GPU run's
directory under /root was emptied mid-training, most likely by a sampled `rm`). Each session's runner is
PID 1 of a PID namespace of its own with its own /proc, so a command sees and signals only its session's
processes (a sampled `kill -9 -1` or `pkill` ended a GPU run's whole device call). This keeps a sampled
command off the kit's files and processes, not a deliberate one: commands still run as root with the
host's network, kernel knobs and other files, and may undo a mount.
Otherwise commands run in the temp copy of WORKDIR and absolute paths point at the host (RUN
lines too: a line writing to /app writes the host's /app). RUN lines that install packages are
skipped with a warning; install them on the machine yourself.

A session keeps one long-lived runner, the same tiny init the bwrap backend uses
(`init_script.py`), started once (inside the private mount namespace, after the bind mounts,
when there is one): each command is a message to it and it forks the command's `bash -c`, so a
command costs a fork and an exec rather than `unshare`, the mounts and a wrapper shell. A runner
that dies (an agent may kill it) is replaced by a fresh one at the next command.
"""

from __future__ import annotations

import logging
import os
import select
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from mirl.sandbox import layers
from mirl.sandbox.base import (
    TIMEOUT_EXIT_CODE,
    CommandResult,
    HeadTailBuffer,
    SandboxConfig,
    SandboxError,
    VerifyResult,
    refuse_steps,
    task_env,
)
from mirl.sandbox.channel import Channel
from mirl.sandbox.init_script import INIT_CODE
from mirl.sandbox.prelude import join_step, prelude_argv
from mirl.sandbox.process import (
    MARKER_VAR,
    PidsCgroup,
    SessionCgroup,
    collect,
    enlarge_pipe,
    kill_tree,
    marker_token,
    start_ticks,
)
from mirl.sandbox.verifier import PUT_TESTS, run_verifier, tar_of_tests
from mirl.tasks import Task

log = logging.getLogger(__name__)
_WARNED: set[str] = set()  # tasks warned about running unconfined
_V2: list[bool] = []  # whether this process's sessions can run in cgroup-v2 groups (probed once)
_V2_LOCK = threading.Lock()  # sessions start together: one probe, which the others wait for

SESSION_VAR = "MIRL_SESSION"
PIDS_LIMIT = 1024
PRIVATE_DIRS = ("/tmp", "/etc")  # the session's own (see LocalSession._private_copies)
RUNNER_START_S = 15.0
_unshare_ok: bool | None = None
_pidns_ok: bool | None = None
_overlay_ok: dict[str, bool] = {}
_metacopy_ok: dict[str, bool] = {}
_unshare_lock = threading.Lock()

MS_BIND = 0x1000
# read-only in a session's namespace: the host's programs, libraries and installed software (a GPU image's
# Python and torch live under /opt); the rest of the host stays writable for what a task creates (/solution)
READ_ONLY = [b"/usr", b"/bin", b"/sbin", b"/lib", b"/lib32", b"/lib64", b"/libx32", b"/boot", b"/opt"]
# the host users' files: overlays in a session (seen, but a session's writes, `useradd -m` included, stay its own),
# read-only where overlayfs is not available; a directory the task binds as its own (WORKDIR /root) stays a bind
SHIELDED = ("/root", "/home")


def unshare_works() -> bool:
    """Root and `unshare --mount` usable (containers without CAP_SYS_ADMIN say no). Checked once per
    process; sessions starting at the same time wait for the one check rather than reading a
    half-made answer (which once sent concurrent sessions to the host's real /app)."""
    global _unshare_ok
    with _unshare_lock:
        if _unshare_ok is None:
            ok = False
            if os.geteuid() == 0 and shutil.which("unshare"):
                try:
                    r = subprocess.run(
                        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, timeout=10
                    )
                    ok = r.returncode == 0
                except (OSError, subprocess.SubprocessError):
                    pass
            _unshare_ok = ok
        return _unshare_ok


def pid_namespace_works() -> bool:
    """A session's runner can be PID 1 of a namespace of its own with its own /proc (`prelude`'s "pidns"
    step; some containers refuse a new /proc). Checked once per process, after `unshare_works`."""
    global _pidns_ok
    if not unshare_works():
        return False
    with _unshare_lock:
        if _pidns_ok is None:
            try:
                r = subprocess.run(prelude_argv([("unshare",), ("pidns",)], ["true"]), capture_output=True, timeout=10)
                _pidns_ok = r.returncode == 0
            except (OSError, subprocess.SubprocessError):
                _pidns_ok = False
            if not _pidns_ok:
                log.warning("local sandbox: no PID namespace of its own for a session; a command can signal every "
                            "process of this machine's user, the kit's included")
        return _pidns_ok


def overlay_works(lower: str = "/etc") -> bool:
    """An overlay over the host's `lower` (/etc, /root, /home), with its upper layer in the temp directory
    the sessions use, can be mounted in a private mount namespace (not where that directory is itself
    an overlay, as in many containers). Checked once per process and directory, and with it whether
    the overlay takes `metacopy=on` (`_metacopy_ok`)."""
    with _unshare_lock:
        if lower not in _overlay_ok:
            _overlay_ok[lower] = _probe_overlay(lower, "")
            _metacopy_ok[lower] = _overlay_ok[lower] and _probe_overlay(lower, ",metacopy=on")
        return _overlay_ok[lower]


def _probe_overlay(lower: str, extra: str) -> bool:
    if not shutil.which("mount"):
        return False
    tmp = Path(tempfile.mkdtemp(prefix="mirl-overlay-probe-"))
    try:
        (tmp / "upper").mkdir()
        (tmp / "work").mkdir()
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "mount", "-t", "overlay", "overlay",
                            "-o", _overlay_options(lower, tmp / "upper", tmp / "work") + extra, lower],
                           capture_output=True, timeout=10)
        return r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _overlay_options(lower: str, upper: Path, work: Path, metacopy: bool = False) -> str:
    """With `metacopy`, a `chmod -R` or `chown -R` over the host's /root copies the files' metadata up,
    not their data (a sampled one over a Python tree would copy gigabytes a session)."""
    return f"lowerdir={lower},upperdir={upper},workdir={work}" + (",metacopy=on" if metacopy else "")


def _installs(step: layers.Step) -> bool:
    return any(
        layers._install_args(words) is not None or os.path.basename(words[0]) in ("curl", "wget")
        for words in layers._segments(step.command)
    )


def _sweep_on(tokens: list[bytes], sids: list[int], rounds: int = 20) -> None:
    for _ in range(rounds):
        if not kill_tree(tokens, sids, max_s=0.5):
            return

def _runner_steps(binds: list[tuple[bytes, bytes]], cgroup: PidsCgroup | SessionCgroup | None, overlays: dict[bytes, bytes] | None = None,
                  namespace: int | None = None, protect: list[bytes] = ()) -> list[tuple]:
    """What the runner does before it runs (`mirl.sandbox.prelude`): join the cgroup, then (if binds)
    a private mount namespace where the host's programs and libraries (READ_ONLY) and the paths in
    `protect` are read-only and the session's directories are bound over the host paths; a bind whose
    destination is in `overlays` (destination -> mount options: /etc, /root, /home) is an overlay
    rather than a bind. With `namespace` (a descriptor of the session's mount namespace, made by its
    first runner), that namespace is joined as it is instead. Either way the runner is then PID 1 of a
    PID namespace of its own, where that works (`pid_namespace_works`)."""
    steps = [join_step(cgroup)] if cgroup is not None else []
    pidns = [("pidns",)] if pid_namespace_works() else []
    if namespace is not None:
        return steps + [("setns", namespace)] + pidns
    if not binds:
        return steps
    overlays = overlays or {}
    steps += [("unshare",), ("readonly", READ_ONLY + list(protect))]
    for src, dest in binds:
        if dest in overlays:
            steps.append(("mount", b"overlay", dest, b"overlay", 0, overlays[dest], f"overlay mount on {dest!r}"))
        else:
            steps.append(("mount", src, dest, None, MS_BIND, None, f"bind mount {src!r} on {dest!r}"))
    return steps + pidns


def _runner_python(dests: list[str]) -> str:
    """The interpreter the runner runs on: this one, unless a bind of the session hides it or its
    library (a task whose WORKDIR is /root, with Python installed under /root/.pyenv), then the
    system's. The runner imports only built-in modules, so any Python 3 serves."""
    def hidden(path: str) -> bool:
        return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dests)

    if not (hidden(os.path.realpath(sys.executable)) or hidden(os.path.realpath(sys.base_prefix))):
        return sys.executable
    for system in ("/usr/bin/python3", "/bin/python3"):
        if os.path.exists(system) and not hidden(os.path.realpath(system)):
            return system
    raise SandboxError(f"local sandbox: the session's binds ({', '.join(dests)}) hide this Python ({sys.executable}) "
                       "and there is no /usr/bin/python3 to run the command runner on")


class Runner(Channel):
    """The session's long-lived runner (`init_script.INIT_CODE`) and its control socket."""

    def __init__(self, binds: list[tuple[Path, str]], cgroup: PidsCgroup | SessionCgroup | None, env: dict[str, str], cwd: str,
                 overlays: dict[str, str] | None = None, namespace: int | None = None, protect: list[str] = ()):
        self.next_id = 0
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        Channel.__init__(self, host, "the local command runner")
        mounts = [(str(src).encode(), dest.encode()) for src, dest in binds]
        steps = _runner_steps(mounts, cgroup, {d.encode(): o.encode() for d, o in (overlays or {}).items()}, namespace,
                              [p.encode() for p in protect])
        python = _runner_python([dest for _, dest in binds if dest not in (overlays or {})])
        argv = prelude_argv(steps, [python, "-I", "-S", "-c", INIT_CODE, str(child.fileno())])
        try:  # no preexec_fn: a vfork, so starting a session never holds the GIL for a fork (see prelude.py)
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd,
                env=env, pass_fds=(child.fileno(),) + ((namespace,) if namespace is not None else ()),
                start_new_session=True,
            )
        except (OSError, subprocess.SubprocessError) as e:
            host.close()
            what = "binding " + ", ".join(d for _, d in binds) + " in a private mount namespace" if binds else "it"
            raise SandboxError(f"local sandbox: could not start the command runner ({what} failed: {e})") from e
        finally:
            child.close()
        if self.wait_for(lambda m: m["op"] == "ready", RUNNER_START_S) is None:
            detail = b""
            try:  # a prelude step that failed has written why and exits
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
            if self.proc.poll() is not None and self.proc.stderr is not None:
                detail = self.proc.stderr.read()[-800:]
            self.close()
            raise SandboxError(f"local sandbox: the command runner did not start: {detail.decode(errors='replace') or 'no output'}")
        self.proc.stderr.close()  # it writes nothing there once it runs

    def alive(self) -> bool:
        """Running, and its end of the control socket still open: a killed runner's socket closes while
        it exits, a moment before `poll` can reap it (a command sent in that moment met a broken pipe)."""
        if self.proc.poll() is not None:
            return False
        watch = select.poll()
        watch.register(self.sock, 0)  # hang-up and error are reported whatever is asked for
        return not any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in watch.poll(0))

    def close(self) -> None:
        try:
            self.sock.close()  # the runner exits when its control socket closes
        except OSError:
            pass
        try:
            self.proc.kill()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.warning("local command runner %d did not exit", self.proc.pid)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


class LocalSession:
    """Commands as host subprocesses in a temp copy of the task's files."""

    def __init__(self, task: Task, config: SandboxConfig):
        self.task, self.config = task, config
        refuse_steps(task, "local")
        extra_env = task_env(task)
        self.id = uuid.uuid4().hex
        self.lock = threading.Lock()
        self.sweeper: threading.Thread | None = None  # still killing what a timed-out command left
        self.closed = False
        self.sids: list[int] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="mirl-local-"))
        self.root = self.tmp / "root"
        self.home = self.tmp / "home"  # on the host; commands see it at the same path
        try:
            plan, runs, written = layers.apply_to_dir(task, self.root)
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        for d in ("logs/verifier", "logs/agent", "tests"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.workdir = plan.workdir
        self.env = {
            "PATH": os.environ.get("PATH", layers.DEFAULT_PATH),
            "HOME": str(self.home),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            **plan.env,
            **extra_env,
            SESSION_VAR: self.id,
        }
        self.namespaced = unshare_works()
        self.binds = []
        self.overlays: dict[str, str] = {}  # destination -> mount options: /etc, /root and /home where overlayfs works
        self.protect: list[str] = []  # read-only in the session: the kit's directories, SHIELDED ones without overlays
        self.namespace: int | None = None  # a descriptor of its mount namespace, which a new runner joins
        if self.namespaced:
            own = [plan.workdir, "/logs", "/tests", *PRIVATE_DIRS]
            self._private_copies()
            own += self._shield(own)
            # the temp root lies under the host's /tmp, which the session's own /tmp covers: HOME is kept there
            if self._under_tmp(self.home):
                self.home = self.root / "tmp" / os.path.relpath(os.path.realpath(self.home), "/tmp")
            # a WORKDIR under an overlaid directory (/root/app) is bound over it, hiding what the host has there
            wd = os.path.normpath(plan.workdir)
            keep = {wd} if any(wd.startswith(o.rstrip("/") + "/") for o in self.overlays) else set()
            self.binds = self._bind_points(own + [d for w in written for d in self._merged(w, own)], keep)
        if not self.namespaced:
            log.warning(
                "local sandbox for %s: no private mount namespace (needs root and `unshare`); commands run in %s "
                "and the task's absolute paths (/app, /tests, /logs) point at the host", task.id, self.root,
            )
        self.home.mkdir(parents=True, exist_ok=True)
        self.bash = shutil.which("bash", path=self.env["PATH"]) or shutil.which("bash") or "/bin/bash"
        self.runner: Runner | None = None
        self.starts: list[int | None] = []  # when each runner started (`start_ticks`)
        self.cgroup = session_cgroup(f"mirl-local-{self.id[:12]}")
        self.skipped: list[layers.Step] = []  # install lines the local backend did not run
        try:
            self.runner = self._start_runner()
            for step in runs:
                self._run_build_step(step)
        except BaseException:
            self.close()
            raise

    @property
    def since(self) -> int | None:
        """No process of the session started before this (`kill_tree` passes over older ones); None when
        a runner's start is unknown."""
        return None if not self.starts or None in self.starts else min(self.starts)

    @staticmethod
    def _under_tmp(path: Path) -> bool:
        return os.path.realpath(path).startswith("/tmp/")

    def _private_copies(self) -> None:
        """The session's own /tmp (empty but for what the task put there) and /etc (the host's under the
        task's files: an overlay, else a copy): a RUN line's `groupadd`, or a file it moves out of /tmp,
        then changes this session alone, not the host nor the sessions beside it."""
        (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "tmp", 0o1777)
        if overlay_works():  # the task's files under /etc are the upper layer as they lie
            (self.root / "etc").mkdir(exist_ok=True)
            (self.tmp / "etc-work").mkdir()
            self.overlays["/etc"] = _overlay_options("/etc", self.root / "etc", self.tmp / "etc-work")
            self._copy_etc_mounts()
            return

        def keep_task_files(src: str, dst: str) -> None:
            if not os.path.lexists(dst):
                shutil.copy2(src, dst, follow_symlinks=False)

        try:
            shutil.copytree("/etc", self.root / "etc", symlinks=True, dirs_exist_ok=True, copy_function=keep_task_files,
                            ignore_dangling_symlinks=True)
        except shutil.Error as e:  # unreadable or special files: the rest is copied
            log.debug("local sandbox: /etc copied with %d file(s) left out", len(e.args[0]))

    def _shield(self, own: list[str]) -> list[str]:
        """Keep the session's commands off the host's data: each SHIELDED directory the task does not bind
        as its own becomes an overlay (returned, to be mounted among the binds; the task's files there are
        its upper layer) or, without overlayfs, read-only; the directories the kit runs from (its working
        directory, its HOME, its code and its Python) are read-only. A directory that holds the session's
        temp root is left as it is: the binds' sources and the overlays' upper layers live there."""
        mine = {os.path.normpath(d) for d in own}
        tmp = os.path.realpath(self.tmp)

        def holds_tmp(d: str) -> bool:
            return tmp == d or tmp.startswith(d.rstrip("/") + "/")

        overlaid = []
        for d in map(os.path.realpath, SHIELDED):  # /home may be a link (to /var/home)
            if d in mine or not os.path.isdir(d) or holds_tmp(d):
                continue
            if overlay_works(d):
                upper, st = self.root / d.lstrip("/"), os.stat(d)
                upper.mkdir(parents=True, exist_ok=True)
                os.chown(upper, st.st_uid, st.st_gid)  # /root stays 0700 in the session, as on the host
                os.chmod(upper, st.st_mode & 0o7777)
                work = self.tmp / f"{d.strip('/').replace('/', '-')}-work"
                work.mkdir()
                self.overlays[d] = _overlay_options(d, upper, work, _metacopy_ok.get(d, False))
                overlaid.append(d)
            else:
                self.protect.append(d)
        kit = [os.path.expanduser("~"), str(Path(__file__).resolve().parents[2]), sys.prefix]
        try:
            kit.append(os.getcwd())
        except OSError:  # the working directory was removed: nothing there to keep
            pass
        for d in dict.fromkeys(map(os.path.realpath, kit)):
            inside = [s for s in (*overlaid, *self.protect, *(p.decode() for p in READ_ONLY))
                      if d == s or d.startswith(s.rstrip("/") + "/")]
            if d == "/" or self._under_tmp(Path(d)) or inside or holds_tmp(d):
                continue
            self.protect.append(d)
        return overlaid

    def _copy_etc_mounts(self) -> None:
        """What is mounted on paths inside the host's /etc (a container's resolv.conf, hosts and
        hostname) into the upper layer, unless the task put its own there: an overlay's lower layer is
        the directory alone, without the mounts on it, so these would show the files underneath."""
        try:
            with open("/proc/self/mountinfo") as f:
                points = [line.split()[4].replace("\\040", " ") for line in f]
        except OSError:
            return
        for point in sorted({p for p in points if p.startswith("/etc/")}, key=len):
            dest = self.root / point.lstrip("/")
            if os.path.lexists(dest):
                continue
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                if os.path.isdir(point):
                    shutil.copytree(point, dest, symlinks=True)
                else:
                    shutil.copy2(point, dest)
            except (OSError, shutil.Error) as e:
                log.debug("local sandbox: %s (mounted in /etc) not copied: %s", point, e)

    def _merged(self, dest: str, own: list[str]) -> list[str]:
        """Where a COPY destination is bound: itself, unless it is a directory the host already has
        with content (`COPY opt /opt`), which is then merged entry by entry, as an image layer is, so
        the host's other entries there (the Python this runs on, in /opt) stay visible."""
        dest = os.path.normpath(dest)
        src = self.root / dest.lstrip("/")
        inside_own = any(dest == o or dest.startswith(o.rstrip("/") + "/") for o in map(os.path.normpath, own))
        if inside_own or not src.is_dir() or src.is_symlink() or not os.path.isdir(dest) or not os.listdir(dest):
            return [dest]
        return [d for entry in sorted(os.listdir(src)) for d in self._merged(os.path.join(dest, entry), own)]

    def _bind_points(self, dests: list[str], keep: set[str] = frozenset()) -> list[tuple[Path, str]]:
        """(temp path, host path) pairs, outermost first, nested ones dropped but those in `keep`; mount
        points made."""
        out: list[tuple[Path, str]] = []
        for dest in sorted({os.path.normpath(d) for d in dests if d and d != "/"}, key=len):
            if dest not in keep and any(dest == b or dest.startswith(b.rstrip("/") + "/") for _, b in out):
                continue
            src = self.root / dest.lstrip("/")
            if not src.exists():
                src.mkdir(parents=True)
            try:
                if src.is_dir():
                    os.makedirs(dest, exist_ok=True)
                elif not os.path.exists(dest):
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    open(dest, "a").close()
            except OSError as e:
                raise SandboxError(f"local sandbox: cannot create mount point {dest} on the host: {e}") from e
            out.append((src, dest))
        # /tmp last: the session's temp root (the other binds' sources) lives under the host's /tmp
        return sorted(out, key=lambda b: b[1] == "/tmp")

    def _run_build_step(self, step: layers.Step) -> None:
        if _installs(step):
            self.skipped.append(step)
            log.warning(
                "local sandbox for %s: skipping Dockerfile line %d (`%s`): the local backend does not install "
                "packages; install them on this machine yourself", self.task.id, step.line, step.text[:100],
            )
            return
        cwd = step.workdir
        res = self._exec(f"cd {shlex.quote(cwd)} && {step.command}", self.task.build_timeout_s, step.env)
        if res.exit_code != 0:
            hint = ""
            if res.exit_code == 127 and self.skipped:  # command not found: most likely what was not installed
                lines = ", ".join(str(s.line) for s in self.skipped)
                hint = (f"\n(the local backend skipped the install line(s) {lines}: install those packages on this "
                        "machine, or use the docker or bwrap backend)")
            raise SandboxError(
                f"task {self.task.id}: Dockerfile line {step.line} failed (exit {res.exit_code}):\n"
                f"{res.output.strip()[-1000:]}{hint}")

    def _start_runner(self) -> Runner:
        """The session's runner. The first one makes the session's mount namespace (binds, overlay) and
        the session keeps a descriptor of it; a runner started after one died joins that namespace, so
        processes the dead one left see the same mounts as new ones (never a second overlay on one
        upper layer)."""
        env = {"PATH": self.env["PATH"], "LANG": self.env["LANG"], SESSION_VAR: self.id}
        runner = Runner(self.binds, self.cgroup, env, str(self.root), self.overlays, self.namespace, self.protect)
        self.starts.append(start_ticks(runner.proc.pid))  # the session's processes descend from its runners
        if self.binds and self.namespace is None:
            try:
                self.namespace = os.open(f"/proc/{runner.proc.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                runner.close()
                raise
        return runner

    def _cwd(self, cwd: str) -> str:
        if self.namespaced:
            return cwd
        host_cwd = self.root / cwd.lstrip("/")
        host_cwd.mkdir(parents=True, exist_ok=True)
        return str(host_cwd)

    def _exec(self, command: str, timeout: float, env: dict[str, str] | None = None, cwd: str | None = None,
              stdin: int | None = None) -> CommandResult:
        with self.lock:
            if self.closed:
                raise SandboxError("the session is closed")
            if self.runner is None or not self.runner.alive():  # an agent's command may have killed it
                if self.runner is not None:
                    self.runner.close()
                    self.runner = None
                self.runner = self._start_runner()
            runner = self.runner
            runner.inbox.clear()  # replies about earlier commands (a timed-out one's late exit)
            runner.next_id += 1
            cid, marker = runner.next_id, uuid.uuid4().hex
            full_env = {**self.env, **(env or {}), MARKER_VAR: marker}
            msg = {"op": "run", "id": cid, "argv": [self.bash, "-c", command], "env": full_env,
                   "cwd": self._cwd(cwd or self.workdir), "spawn": "posix"}
            r, w = os.pipe()
            enlarge_pipe(w)
            started = time.monotonic()
            try:
                runner.send(msg, [w, r] + ([stdin] if stdin is not None else []))
            except SandboxError:
                os.close(r)
                raise
            finally:
                os.close(w)
            buf = HeadTailBuffer(self.config.output_limit)
            gone: list[bool] = []

            def poll_exit() -> int | None:
                while True:  # read every queued reply: collect waits on the socket being readable
                    m = runner.take(lambda m: m["op"] == "exit" and m["id"] == cid)
                    if m is not None:
                        return m["code"]
                    if gone:
                        return -1
                    queued = len(runner.inbox)
                    if not runner.pump(0):
                        gone.append(True)
                    elif len(runner.inbox) == queued:
                        return None

            try:
                code = collect(r, buf, started + timeout, runner.sock.fileno(), poll_exit)
                timed_out = code is None
                pid = runner.take(lambda m: m["op"] == "started" and m["id"] == cid)
                if timed_out:
                    if pid is None:
                        pid = runner.wait_for(lambda m: m["op"] == "started" and m["id"] == cid, 0.1)
                    sids = [pid["pid"]] if pid else []
                    tokens = [marker_token(MARKER_VAR, marker)]
                    if kill_tree(tokens, sids, since=self.since):
                        # on a loaded machine a fork bomb can outrun one budget: keep sweeping a while
                        self.sweeper = threading.Thread(target=_sweep_on, args=(tokens, sids), daemon=True)
                        self.sweeper.start()
                    code = TIMEOUT_EXIT_CODE
                elif code == -1:
                    buf.feed(b"\nmirl: the local command runner ended while the command ran\n")
                if pid is not None:
                    self.sids.append(pid["pid"])
            finally:
                if not gone:
                    try:  # the runner drains the pipe so a logging background service keeps running
                        runner.send({"op": "release", "id": cid})
                    except SandboxError:
                        pass
                os.close(r)
            return CommandResult(buf.text(), code, time.monotonic() - started, timed_out, buf.truncated)

    def run(self, command: str, timeout: float | None = None, env: dict[str, str] | None = None) -> CommandResult:
        timeout = self.config.command_timeout_s if timeout is None else timeout
        self._join_sweeper()
        return self._exec(command, timeout, env)

    def _join_sweeper(self) -> None:
        """Let the last timeout's sweep finish (it may still be killing a fork bomb) so a command can fork."""
        if self.sweeper is not None:
            self.sweeper.join(timeout=10)
            self.sweeper = None

    def _put_tests(self) -> None:
        """Inside the session's mount namespace, as the bwrap backend does: a host-side copy would follow
        links a command (or its background process, at any moment) put at /logs/verifier or in /tests
        out to the host's files. Without a namespace, into the temp root's own folders."""
        if not self.binds:
            self._put_tests_in_temp_root()
            return
        self._join_sweeper()
        with tar_of_tests(self.task) as f:
            res = self._exec(PUT_TESTS, 60, cwd="/", stdin=f.fileno())
        if res.exit_code != 0:
            raise SandboxError(f"could not copy the tests into the session: {res.output.strip()[-400:]}")

    def _put_tests_in_temp_root(self) -> None:
        """On the host: a link or file a command left at a folder (or its parent) is removed, never followed."""
        dest, logs = self.root / "tests", self.root / "logs" / "verifier"
        root = os.path.realpath(self.root)
        for d in (dest, logs):
            for p in (d.parent, d):
                if p.is_symlink() or (p.exists() and not p.is_dir()):
                    p.unlink()
                p.mkdir(exist_ok=True)
                if os.path.realpath(p) != root and not os.path.realpath(p).startswith(root + os.sep):
                    raise SandboxError(f"task {self.task.id}: {p} leads out of the session's files to "
                                       f"{os.path.realpath(p)}; the tests were not put there")
            for entry in d.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        if self.task.tests_dir.is_dir():
            shutil.copytree(self.task.tests_dir, dest, symlinks=True, dirs_exist_ok=True)
        if self.task.layout == "terminal-bench":
            shutil.copy2(self.task.test_script, dest / "run-tests.sh")

    def read_file(self, path: str) -> str | None:
        """A file as the session's commands see it: through the runner's mount namespace
        (`/proc/<pid>/root`) where there is one, else in the session's temp root."""
        rel = os.path.normpath(path).lstrip("/")
        runner = self.runner
        if self.binds and runner is not None and runner.alive():
            here = Path(f"/proc/{runner.proc.pid}/root") / rel
        else:
            here = self.root / rel
        try:
            return here.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def verify(self) -> VerifyResult:
        return run_verifier(self, self._put_tests)

    def close(self) -> None:
        if self.closed:
            return
        with self.lock:
            self.closed = True
            if self.runner is not None:  # first: the runner carries the session's marker too, and a sweep
                self.runner.close()      # that finds nobody is one scan of /proc (three when it finds one)
                self.runner = None
            # A cgroup holds every process of the session (the runner joined it before anything started):
            # they are killed there, without a scan of /proc, whose hundreds of reads hold the GIL a GPU
            # engine's thread needs. A command that writes itself out of the group (sessions run as root
            # on the host: unconfined by design) escapes that; the scan by marker stays where there is no group
            # or it would not go.
            group, self.cgroup = self.cgroup, None
            removed = group is not None and group.remove()
            if not removed:
                kill_tree([marker_token(SESSION_VAR, self.id)], self.sids, since=self.since)
                if group is not None:  # what held it may be gone now
                    group.remove(wait_s=0.5)
            if self.namespace is not None:
                os.close(self.namespace)
                self.namespace = None
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> LocalSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def session_cgroup(name: str) -> PidsCgroup | SessionCgroup | None:
    """The group a session's processes run in: cgroup v1's pids controller, which also bounds a fork bomb;
    else a cgroup-v2 group, which only holds them for close (hosts on v2 alone); else None (close scans
    /proc for the session's marker)."""
    group = PidsCgroup.create(name, PIDS_LIMIT)
    if group is not None:
        return group
    if not _V2:
        with _V2_LOCK:
            if not _V2:
                SessionCgroup.sweep_stale()
                _V2.append(_v2_joinable())
    return SessionCgroup.create(name) if _V2[0] else None


def _v2_joinable() -> bool:
    """Whether a runner can join a cgroup-v2 group made here (a delegation or cgroup namespace can forbid it,
    and a runner that cannot join fails to start): one probe process, once per process."""
    probe = SessionCgroup.create(f"mirl-probe-{uuid.uuid4().hex[:8]}")
    if probe is None:
        return False
    try:
        done = subprocess.run(prelude_argv([join_step(probe)], ["true"]), capture_output=True, timeout=30)
        if done.returncode != 0:
            log.info("local sandbox: sessions cannot join a cgroup-v2 group here (%s); close scans /proc instead",
                     done.stderr.decode(errors="replace").strip()[:200])
        return done.returncode == 0
    except (OSError, subprocess.SubprocessError) as e:
        log.info("local sandbox: the cgroup-v2 probe failed (%s); close scans /proc instead", e)
        return False
    finally:
        probe.remove()


class LocalSandbox:
    """No snapshots: commands write anywhere on the host, so no directory of ours holds a session's
    state. Sessions have no `snapshot` method (callers rerun prefixes instead)."""

    name = "local"

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig(backend="local")

    def start(self, task: Task, snapshot: str | None = None) -> LocalSession:
        if snapshot is not None:
            raise SandboxError(f"the local backend cannot snapshot (commands write anywhere on the host), so it "
                               f"cannot start from snapshot {snapshot!r}: use the docker or bwrap backend")
        if task.id not in _WARNED:  # once per task and process: a stage starts hundreds of sessions
            _WARNED.add(task.id)
            log.warning("local sandbox: task %s runs UNCONFINED on this machine (throwaway machines only)", task.id)
        return LocalSession(task, self.config)
