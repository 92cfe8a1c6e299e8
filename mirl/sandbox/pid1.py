"""The container's PID 1 in docker sessions: a command runner the host talks to over the attach stream.

Why: a `docker exec` costs a runc exec (~60-150 ms); spawning `bash -c` from a process already in
the container costs ~5 ms. As PID 1 it also survives `kill -9 -1` (the kernel never delivers
SIGKILL to a namespace's init from inside) and reaps orphaned background processes.

Protocol: one JSON request per line on stdin {"id", "cmd", "cwd", "env", "timeout", "limit"};
one JSON reply per line on stdout {"id", "exit", "timed_out", "head", "tail" (base64), "total"}.
Standalone (stdlib only, Python >= 3.6): the docker backend passes this file's text to
`python3 -c`, so nothing is installed in the image.
"""

import base64
import errno
import json
import os
import select
import signal
import sys
import time

DEVNULL = os.open("/dev/null", os.O_RDONLY)
status = {}  # pid -> exit status of children reaped by the reaper


def reap():
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        status[pid] = st


def marked(marker):
    needle = ("MIRL_CMD=" + marker).encode()
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            pass
    return found


def kill_marked(marker):
    for _ in range(10):
        pids = marked(marker)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap()


def count_processes():
    return sum(1 for e in os.listdir("/proc") if e.isdigit()) - 1  # not counting PID 1


def kill_everything():
    """Used when the process limit is exhausted (a fork bomb): nothing else can run otherwise."""
    for _ in range(20):
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        time.sleep(0.02)
        reap()
        if not [e for e in os.listdir("/proc") if e.isdigit() and int(e) != os.getpid()]:
            return


def spawn(req, write_fd):
    env = dict(os.environ)
    env.update(req.get("env") or {})
    env["MIRL_CMD"] = req["id"]
    cwd = req.get("cwd") or "/"
    if not os.path.isdir(cwd):
        cwd = "/"
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.chdir(cwd)
            os.dup2(DEVNULL, 0)
            os.dup2(write_fd, 1)
            os.dup2(write_fd, 2)
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            os.execvpe("bash", ["bash", "-c", req["cmd"]], env)
        except BaseException as e:
            os.write(2, ("cannot run bash: %s\n" % e).encode())
        os._exit(127)
    return pid


def run(req):
    limit = max(2, int(req.get("limit") or 10000))
    half = limit // 2
    head, tail, total = bytearray(), bytearray(), 0
    note = b""
    pids_limit = int(req.get("pids_limit") or 0)
    if pids_limit and count_processes() >= 0.9 * pids_limit:  # e.g. a fork bomb still running
        count = count_processes()
        kill_everything()
        note = b"[sandbox: %d processes filled the process limit; every background process was killed]\n" % count
    r, w = os.pipe()
    try:
        pid = spawn(req, w)
    except OSError as e:
        os.close(r)
        os.close(w)
        if e.errno not in (errno.EAGAIN, errno.ENOMEM):
            raise
        kill_everything()
        r, w = os.pipe()
        pid = spawn(req, w)
        note = b"[sandbox: the process limit was reached; every background process was killed]\n"
    os.close(w)
    deadline = time.monotonic() + float(req.get("timeout") or 120)
    timed_out, exit_code, ended = False, None, None

    def feed(chunk):
        nonlocal total, tail
        total += len(chunk)
        room = half - len(head)
        if room > 0:
            head.extend(chunk[:room])
            chunk = chunk[room:]
        if chunk:
            tail.extend(chunk)
            if len(tail) > 2 * half:
                del tail[: len(tail) - half]

    if note:
        feed(note)
    open_pipe = True
    while True:
        reap()
        if pid in status and ended is None:
            st = status.pop(pid)
            exit_code = os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st)
            ended = time.monotonic()
        now = time.monotonic()
        if ended is not None and (not open_pipe or now - ended > 0.02):
            break  # the shell is gone; a background child may keep the pipe open: stop reading
        if now >= deadline:
            timed_out = True
            break
        wait = 0.02 if ended is not None else min(0.05, deadline - now)
        if not open_pipe:
            time.sleep(0.002)
            continue
        ready, _, _ = select.select([r], [], [], max(0.0, wait))
        if ready:
            chunk = os.read(r, 1 << 16)
            if chunk:
                feed(chunk)
            else:
                open_pipe = False
    os.close(r)
    if timed_out:
        kill_marked(req["id"])
        exit_code = 124
    if pids_limit:
        count = count_processes()
        if count >= 0.9 * pids_limit:  # a fork bomb left running would make every later command fail
            kill_everything()
            feed(b"\n[sandbox: %d processes filled the process limit; every background process was killed]\n" % count)
    tail_bytes = bytes(tail[-half:]) if len(tail) > half else bytes(tail)
    return {"id": req["id"], "exit": exit_code, "timed_out": timed_out, "total": total,
            "head": base64.b64encode(bytes(head)).decode(), "tail": base64.b64encode(tail_bytes).decode()}


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *a: os._exit(0))
    out = sys.stdout.buffer
    buf = b""
    while True:
        ready, _, _ = select.select([0], [], [], 1.0)
        reap()
        if not ready:
            continue
        data = os.read(0, 1 << 16)
        if not data:  # the host detached; keep the container alive like `sleep infinity`
            while True:
                time.sleep(1.0)
                reap()
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if not line.strip():
                continue
            req = {}
            try:
                req = json.loads(line.decode())
                reply = {"id": req.get("id"), "pong": True} if req.get("ping") else run(req)
            except Exception as e:  # a bad request must not take PID 1 (and the container) down
                reply = {"id": req.get("id") if isinstance(req, dict) else None, "error": "%s: %s" % (type(e).__name__, e)}
            out.write(json.dumps(reply).encode() + b"\n")
            out.flush()


if __name__ == "__main__":
    main()
