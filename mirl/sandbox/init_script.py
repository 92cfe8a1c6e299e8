"""The tiny init that runs as pid 1 inside every bubblewrap sandbox (sent as `python3 -c`).

Why an init instead of `nsenter` per command: a process entering the sandbox from the host would
carry the host's full root capabilities until it exec'd a binary from the sandbox (which the agent
can replace), and it would land outside the sandbox's capability and cgroup limits. The init is
started before any agent command runs, with bwrap's reduced capability set, and every command is
forked from it. Being pid 1 of the namespace it ignores SIGKILL from inside (`kill -9 -1` does
not end the session), reaps orphans, and when it dies the kernel kills everything in the sandbox.

Protocol over a SOCK_SEQPACKET socket, one message per packet, file descriptors attached. The
host sends `marshal`-ed dicts (the init imports only built-in modules: Python starts in ~25 ms);
the init answers in plain ASCII words, so the host never deserialises anything rich from inside.

- host -> init ``{"op": "run", "id", "argv", "env", "cwd"}`` + fds [out_w, out_r, (stdin)]:
  fork, setsid, stdin/stdout/stderr wired, exec. Reply ``started ID PID``. With ``"spawn":
  "posix"`` in the message the command is started by `os.posix_spawn` instead (vfork: no copy of
  the init's page tables, about half a millisecond less per command); the init chdirs for it.
- init -> host ``exit ID CODE`` when that shell exits (128+N for signal N).
- host -> init ``{"op": "release", "id"}``: the host stopped reading; init drains out_r to EOF so
  background children that still write to it do not die of SIGPIPE.
- host -> init ``{"op": "kill", "id", "marker", "sid"}``: SIGKILL every process whose environ
  holds the marker or whose session is `sid`, until none is left. Reply ``killed ID``.
- init -> host ``ready PID`` once, at start, after dropping from the capability bounding set
  every capability bwrap did not leave it (bwrap run by root keeps the bounding set full).
"""

INIT_CODE = r"""
import _socket, array, marshal, os, select, signal, sys, time
ctl = _socket.socket(fileno=int(sys.argv[1]))
FDS_SPACE = _socket.CMSG_SPACE(8 * array.array("i").itemsize)
wr, ww = os.pipe()
os.set_blocking(wr, False); os.set_blocking(ww, False)
signal.set_wakeup_fd(ww)
signal.signal(signal.SIGCHLD, lambda *a: None)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
running, outs, drains = {}, {}, set()
dead = []  # markers of commands killed on timeout: their leftovers are swept when a new command cannot start
os.set_inheritable(ctl.fileno(), False)
DEFAULT_SIGS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

def send(*words):
    try:
        ctl.send(" ".join(str(w) for w in words).encode())
    except OSError:
        os._exit(0)

def recv():
    data, anc, _, _ = ctl.recvmsg(1 << 22, FDS_SPACE)
    fds = array.array("i")
    for level, kind, payload in anc:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    for fd in fds:  # no command inherits another's pipes (posix_spawn closes only close-on-exec fds)
        os.set_inheritable(fd, False)
    return data, list(fds)

def spawn_posix(m, out_w, stdin):
    try:
        os.chdir(m["cwd"])
    except OSError as e:
        os.write(out_w, ("mirl: cannot enter working directory %s: %s\n" % (m["cwd"], e.strerror)).encode())
        os.chdir("/")
    if stdin is not None:
        acts = [(os.POSIX_SPAWN_DUP2, stdin, 0)]
    else:
        acts = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0)]
    acts += [(os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, out_w, 2)]
    try:
        return with_room(lambda: os.posix_spawn(m["argv"][0], m["argv"], m["env"], file_actions=acts,
                                                setsid=True, setsigmask=(), setsigdef=DEFAULT_SIGS))
    except OSError as e:
        os.write(out_w, ("mirl: cannot start %s: %s\n" % (m["argv"][0], e)).encode())
        return None
    finally:
        os.chdir("/")

def with_room(start):
    # a killed fork bomb's last children may still fill the process table: sweep them, then retry
    end = time.monotonic() + 10
    while True:
        try:
            return start()
        except OSError as e:
            if e.errno != 11 or time.monotonic() > end:  # EAGAIN: the pids limit is still full
                raise
            for token in dead:
                sweep(token, None, 0.2)
            reap()
            time.sleep(0.1)

def spawn(m, fds):
    out_w, out_r = fds[0], fds[1]
    stdin = fds[2] if len(fds) > 2 else None
    if m.get("spawn") == "posix":
        pid = spawn_posix(m, out_w, stdin)
        os.close(out_w)
        if stdin is not None:
            os.close(stdin)
        outs[m["id"]] = out_r
        if pid is None:
            send("exit", m["id"], 127)
            return
        running[pid] = m["id"]
        send("started", m["id"], pid)
        return
    try:
        pid = with_room(os.fork)
    except OSError as e:
        os.write(out_w, ("mirl: cannot start %s: %s\n" % (m["argv"][0], e)).encode())
        os.close(out_w)
        if stdin is not None:
            os.close(stdin)
        outs[m["id"]] = out_r
        send("exit", m["id"], 127)
        return
    if pid == 0:
        try:
            os.setsid()
            signal.set_wakeup_fd(-1)
            for s in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(s, signal.SIG_DFL)
            fd0 = stdin if stdin is not None else os.open("/dev/null", os.O_RDONLY)
            os.dup2(fd0, 0); os.dup2(out_w, 1); os.dup2(out_w, 2)
            os.closerange(3, 1 << 16)
            try:
                os.chdir(m["cwd"])
            except OSError as e:
                os.write(2, ("mirl: cannot enter working directory %s: %s\n" % (m["cwd"], e.strerror)).encode())
                os.chdir("/")
            os.execve(m["argv"][0], m["argv"], m["env"])
        except BaseException as e:
            try:
                os.write(2, ("mirl: cannot start %s: %s\n" % (m["argv"][0], e)).encode())
            finally:
                os._exit(127)
    os.close(out_w)
    if stdin is not None:
        os.close(stdin)
    running[pid] = m["id"]
    outs[m["id"]] = out_r
    send("started", m["id"], pid)

def sid_of(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        s = f.read()
    f = s[s.rfind(b")") + 2:].split()
    return None if f[0] in (b"Z", b"X") else int(f[3])

def marked(token, sid):
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        pid = int(name)
        try:
            s = sid_of(pid)
            if s is None:
                continue
            if s == sid:
                pids.append(pid); continue
            with open("/proc/%d/environ" % pid, "rb") as f:
                if token in f.read().split(b"\0"):
                    pids.append(pid)
        except (OSError, ValueError, IndexError):
            pass
    return pids

def kill(m):
    # stop everything marked, sweep after sweep, until nobody new appears (a fork bomb
    # converges: stopped processes cannot fork), then SIGKILL them all
    token = ("MIRL_CMD=%s" % m["marker"]).encode()
    dead[:] = dead[-7:] + [token]
    sweep(token, m.get("sid"), 1.5)
    send("killed", m["id"])
    for _ in range(20):  # on a loaded machine a bomb can outrun one budget: keep sweeping
        if not sweep(token, m.get("sid"), 0.5):
            break

def sweep(token, sid, budget):
    end = time.monotonic() + budget
    stopped = set()
    while time.monotonic() < end:
        new = [p for p in marked(token, sid) if p not in stopped]
        if not new:
            break
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
            stopped.add(pid)
    for pid in stopped | set(marked(token, sid)):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    reap()
    return len(stopped)

def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in running:
            code = os.waitstatus_to_exitcode(status)
            send("exit", running.pop(pid), code if code >= 0 else 128 - code)

def drop_bounding_set():
    # bwrap run by root lowers the effective set but leaves the bounding set full, so a setuid or
    # file-capability binary could regain any capability: keep only what the init holds
    with open("/proc/self/status") as f:
        held = int(next(line for line in f if line.startswith("CapEff:")).split()[1], 16)
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    import _ctypes  # the C module alone: the ctypes package would add ~20 ms to every session start

    class c_int(_ctypes._SimpleCData):
        _type_ = "i"

    class CFunc(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = c_int

    prctl = CFunc(_ctypes.dlsym(_ctypes.dlopen(None, os.RTLD_NOW), "prctl"))
    for cap in range(last + 1):
        if not held >> cap & 1 and prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            sys.stderr.write("mirl init: cannot drop capability %d from the bounding set: %s\n"
                             % (cap, os.strerror(_ctypes.get_errno())))
            sys.exit(1)

drop_bounding_set()
send("ready", os.getpid())
while True:
    ready, _, _ = select.select([ctl.fileno(), wr] + list(drains), [], [])
    for fd in ready:
        if fd == wr:
            try:
                os.read(wr, 4096)
            except BlockingIOError:
                pass
            reap()
        elif fd == ctl.fileno():
            try:
                data, fds = recv()
            except OSError:
                os._exit(0)
            if not data:
                os._exit(0)
            m = marshal.loads(data)
            if m["op"] == "run":
                spawn(m, fds)
            elif m["op"] == "release":
                fd_r = outs.pop(m["id"], None)
                if fd_r is not None:
                    drains.add(fd_r)
            elif m["op"] == "kill":
                kill(m)
        else:
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                drains.discard(fd)
                os.close(fd)
"""
