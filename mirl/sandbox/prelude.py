"""Set a sandbox process up (cgroups, mount namespace, mounts) in the new process itself, then exec it.

Why not `preexec_fn`: a `subprocess.Popen` with one must fork (never vfork) and holds the GIL from the
fork until the child has run it. Forking a process as big as one that owns a GPU (CUDA's mappings, the
model, pinned buffers) copies its page tables: measured 26 ms of held GIL per spawn at 4 GB, every
other thread stopped, the engine's owner thread included, once per sandbox session. Here the host
starts `python -I -S -c PRELUDE_CODE SPEC ARGV...` without a preexec (so CPython vforks and the GIL
stays free) and the child does the same steps before it execs ARGV, in the order given; a step that
fails writes `mirl-prelude: WHAT: ERROR` to stderr and exits 126 without running ARGV.

`SPEC` is `marshal`-ed steps in hex (the prelude imports only built-ins and ctypes: ~15 ms a start):
- ("join", path): write this process into a cgroup (`path` is its `cgroup.procs`; v1 or v2)
- ("setns", fd): join the mount namespace `fd` (inherited: pass it in `pass_fds`)
- ("unshare",): a private mount namespace, propagation private from `/` down
- ("mount", source, target, fstype, flags, data, what): mount(2); `what` names it in the error
- ("mkdirs", path): os.makedirs(path, exist_ok=True)
- ("pidns",): a private PID namespace: the process forks, the child is its PID 1 and goes on with the
  next steps (it mounts the namespace's own /proc: give this step after "unshare" or "setns"), the parent
  waits for it and exits with its code. A command inside can then signal only the namespace's
  processes: a sampled `kill -9 -1` or `pkill python` on an unconfined GPU machine once ended the kit
  itself. The child dies with the parent (PR_SET_PDEATHSIG), and the kernel ends the whole namespace with
  its PID 1, so a host that kills the process it started ends everything inside.
- ("readonly", paths): each of these directories (where it is one, not a link) bound on itself with what
  is mounted below it and made read-only, its other flags kept: what runs in the namespace cannot change
  the host's programs and libraries (a policy's `chmod` on /bin once took a GPU machine's bash away
  mid-run); mounts made after this step (a session's binds) stay writable.
"""

from __future__ import annotations

import marshal
import sys

PRELUDE_CODE = r"""
import ctypes, marshal, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.setns.argtypes = (ctypes.c_int, ctypes.c_int)
CLONE_NEWNS, CLONE_NEWPID, MS_REC, MS_PRIVATE = 0x00020000, 0x20000000, 0x4000, 1 << 18

def fail(what, err):
    os.write(2, ("mirl-prelude: %s: %s\n" % (what, err)).encode())
    os._exit(126)

def check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        fail(what, "[Errno %d] %s" % (e, os.strerror(e)))

for step in marshal.loads(bytes.fromhex(sys.argv[1])):
    op = step[0]
    if op == "join":
        try:
            fd = os.open(step[1], os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        except OSError as e:
            fail("join the cgroup " + step[1], e)
    elif op == "setns":
        check(libc.setns(step[1], CLONE_NEWNS), "join the session's mount namespace")
    elif op == "unshare":
        check(libc.unshare(CLONE_NEWNS), "unshare mount namespace")
        check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private in the new namespace")
    elif op == "mount":
        check(libc.mount(step[1], step[2], step[3], step[4], step[5]), step[6])
    elif op == "readonly":
        for path in step[1]:
            if os.path.islink(path) or not os.path.isdir(path):
                continue
            st = os.statvfs(path).f_flag
            own = (st & (2 | 4 | 8 | 1024 | 2048)) | ((1 << 21) if st & 4096 else 0)  # nosuid nodev noexec atime
            check(libc.mount(path, path, None, 4096 | 16384, None), "bind %r on itself" % path)  # MS_BIND | MS_REC
            check(libc.mount(None, path, None, 32 | 4096 | 1 | own, None),  # MS_REMOUNT | MS_BIND | MS_RDONLY
                  "make %r read-only" % path)
    elif op == "pidns":
        check(libc.unshare(CLONE_NEWPID), "unshare PID namespace")
        child = os.fork()
        if child:
            os.closerange(3, 65536)  # the socket and namespace descriptors are the child's now
            _, status = os.waitpid(child, 0)
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)
        check(libc.prctl(1, 9, 0, 0, 0), "die with the parent")  # PR_SET_PDEATHSIG, SIGKILL
        check(libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None), "mount the PID namespace's /proc")
    elif op == "mkdirs":
        try:
            os.makedirs(step[1], exist_ok=True)
        except OSError as e:
            fail("make " + step[1].decode(errors="replace"), e)
    else:
        fail("unknown step", repr(op))
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as e:
    fail("exec " + sys.argv[2], e)
"""


def prelude_argv(steps: list[tuple], argv: list[str]) -> list[str]:
    """The command line that runs `steps` in the new process, then execs `argv`."""
    return [sys.executable, "-I", "-S", "-c", PRELUDE_CODE, marshal.dumps(list(steps)).hex(), *argv]


def join_step(cgroup) -> tuple:
    """The step that moves the process into `cgroup` (a `PidsCgroup`, `MemoryCgroup` or `SessionCgroup`)."""
    return ("join", str(cgroup.path / "cgroup.procs"))
