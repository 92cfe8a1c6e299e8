"""python benchmarks/sandbox.py [--task tasks/count-lines] [--starts 10] [--repeats 5] [--json FILE]

Fresh-session start latency and per-command latency of every sandbox backend available here
(`make_sandbox` for docker, bwrap, local), side by side with mini-swe-agent's own environments
(`pip install mini-swe-agent`): its DockerEnvironment driving the podman CLI on the same image,
its BubblewrapEnvironment on the same base root filesystem as our bwrap backend (its default
flags otherwise: one `bwrap ... bash -c` per command), and its LocalEnvironment. Only the
equivalents of the backends named in --backends run (`--backends local` times the two local rows).
Prints one table with each row's ratio to its equivalent: docker vs mini-swe-agent docker, bwrap
vs mini-swe-agent bubblewrap, local vs mini-swe-agent local.
Targets: per-command latency at most half of mini-swe-agent's; container start <= 500 ms with
the image already built; a cached build (the task's image or layer already made, looked up by a
fresh sandbox that remembers nothing) under 2 s; bwrap session start ~100 ms, command ~10 ms. With local in --backends, a last row times the same commands with no
shell at all (each program spawned directly, builtins free): no backend that runs these programs
on this host can go below it, so its ratio to mini-swe-agent local bounds what local can reach; and
where overlayfs works, a row of the local backend as it is without it (each session copies the
host's /etc). Run it on a quiet machine: the numbers are wall-clock medians.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mirl.sandbox import SandboxConfig, SandboxError, make_sandbox  # noqa: E402
from mirl.tasks import load_task  # noqa: E402

# Typical agent commands: cheap ones, so the sandbox's own overhead dominates.
COMMANDS = [
    "echo hello",
    "pwd",
    "ls -la",
    "cat /etc/os-release",
    "python3 -c 'print(sum(range(1000)))'",
    "grep -n ID /etc/os-release",
    "wc -l /etc/passwd",
    "find /etc -maxdepth 1 -name '*.conf' | head -5",
    "head -3 /etc/passwd && tail -1 /etc/passwd",
    "echo data > /tmp/bench.txt && cat /tmp/bench.txt",
]


def median_ms(values: list[float]) -> float:
    return 1000 * statistics.median(values) if values else float("nan")


def time_commands(run, label: str, repeats: int) -> list[float]:
    """Seconds per command over `repeats` passes of COMMANDS, after one warm-up pass.

    `run(command)` returns (exit code, output tail); every command must succeed."""
    for command in COMMANDS:
        run(command)
    times = []
    for _ in range(repeats):
        for command in COMMANDS:
            t0 = time.perf_counter()
            code, tail = run(command)
            times.append(time.perf_counter() - t0)
            assert code == 0, f"{label}: {command!r} failed: {tail}"
    return times


def row(start_ms: float, close_ms: float, cmd_times: list[float], cached_build_ms: float = float("nan")) -> dict:
    return {"start_ms": start_ms, "close_ms": close_ms, "command_ms": median_ms(cmd_times),
            "command_p90_ms": 1000 * sorted(cmd_times)[int(0.9 * len(cmd_times))], "cached_build_ms": cached_build_ms}


def cached_build_ms(backend: str, task, repeats: int) -> float:
    """Median time for a fresh sandbox to find the task's already built image (docker) or layer (bwrap)."""
    times = []
    for _ in range(repeats):
        if backend == "docker":
            from mirl.sandbox.docker_backend import DockerSandbox

            sandbox = DockerSandbox(SandboxConfig(backend="docker"))
            sandbox.client.ping()  # connecting is not building
            t0 = time.perf_counter()
            sandbox.image_for(task)
        elif backend == "bwrap":
            from mirl.sandbox import bwrap_backend

            t0 = time.perf_counter()
            bwrap_backend.ensure_layer(task, bwrap_backend.rootfs_path())
        else:
            return float("nan")  # the local backend applies the Dockerfile per session: no build to cache
        times.append(time.perf_counter() - t0)
    return median_ms(times)


def bench_ours(backend: str, task, starts: int, repeats: int) -> dict:
    sandbox = make_sandbox(SandboxConfig(backend=backend))
    with sandbox.start(task) as s:  # warm-up: builds the image if needed
        s.run("true")
    start_times, close_times = [], []
    for _ in range(starts):
        t0 = time.perf_counter()
        s = sandbox.start(task)
        start_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        s.close()
        close_times.append(time.perf_counter() - t0)
    with sandbox.start(task) as s:
        cmd_times = time_commands(lambda c: (lambda r: (r.exit_code, r.output[-300:]))(s.run(c)), backend, repeats)
    return row(median_ms(start_times), median_ms(close_times), cmd_times, cached_build_ms(backend, task, repeats))


def image_id(task) -> str:
    """The docker backend's image for `task` (built if needed), as an id the podman CLI accepts."""
    from mirl.sandbox.docker_backend import DockerSandbox

    sandbox = DockerSandbox(SandboxConfig(backend="docker"))
    return sandbox.client.images.get(sandbox.image_for(task)).id


def bench_mini_docker(task, starts: int, repeats: int) -> dict:
    from minisweagent.environments.docker import DockerEnvironment

    from mirl.sandbox.podman import podman_env

    os.environ.update({k: v for k, v in podman_env().items() if k == "CONTAINERS_CONF"})
    image = image_id(task)
    kwargs = dict(image=image, executable="podman", cwd=task.workdir, run_args=["--rm", "--network", "none"])

    def remove(env):
        subprocess.run(["podman", "rm", "-f", "-t", "0", env.container_id], capture_output=True)
        env.container_id = None

    start_times, close_times = [], []
    for _ in range(starts):
        t0 = time.perf_counter()
        env = DockerEnvironment(**kwargs)
        start_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        remove(env)
        close_times.append(time.perf_counter() - t0)
    env = DockerEnvironment(**kwargs)
    try:
        cmd_times = time_commands(lambda c: (lambda o: (o["returncode"], o))(env.execute({"command": c})), "mini docker", repeats)
    finally:
        remove(env)
    return row(median_ms(start_times), median_ms(close_times), cmd_times)


def bench_mini_bubblewrap(repeats: int) -> dict:
    """mini-swe-agent's bubblewrap environment with our base rootfs as its root (read-only, as its
    default binds of the host's /usr, /bin, /lib, /etc are), a tmpfs /tmp and its other defaults."""
    from minisweagent.environments.extra.bubblewrap import BubblewrapEnvironment, BubblewrapEnvironmentConfig

    from mirl.sandbox.image import rootfs_dir

    rootfs = rootfs_dir()
    if not (rootfs / "bin").exists():
        raise SandboxError(f"no base root filesystem at {rootfs}: run `mirl image build` first")
    defaults = BubblewrapEnvironmentConfig().wrapper_args
    host_binds = {"/usr", "/bin", "/lib", "/lib64", "/etc"}
    wrapper_args, i = ["--ro-bind", str(rootfs), "/"], 0
    while i < len(defaults):  # its defaults minus the host directories the rootfs replaces
        if defaults[i] == "--ro-bind" and defaults[i + 1] in host_binds:
            i += 3
            continue
        wrapper_args.append(defaults[i])
        i += 1
    t0 = time.perf_counter()
    env = BubblewrapEnvironment(wrapper_args=wrapper_args)  # cwd: its own temp dir, under the tmpfs /tmp
    start = time.perf_counter() - t0  # it keeps no sandbox between commands: a start is a mkdir
    try:
        cmd_times = time_commands(lambda c: (lambda o: (o["returncode"], o))(env.execute({"command": c})), "mini bubblewrap", repeats)
    finally:
        env.cleanup()
    return row(1000 * start, 0.0, cmd_times)


def bench_mini_local(repeats: int) -> dict:
    from minisweagent.environments.local import LocalEnvironment

    with tempfile.TemporaryDirectory() as cwd:
        t0 = time.perf_counter()
        env = LocalEnvironment(cwd=cwd)
        start = time.perf_counter() - t0
        cmd_times = time_commands(lambda c: (lambda o: (o["returncode"], o))(env.execute({"command": c})), "mini local", repeats)
    return row(1000 * start, 0.0, cmd_times)


def run_without_shell(command: str, cwd: str) -> tuple[int, str]:
    """Run one of COMMANDS with no shell at all: each program `posix_spawn`ed directly, pipes and
    `>` wired by hand, `echo`/`pwd` answered in-process (a shell's builtins cost it nothing).
    The floor any backend that runs these programs on this host can reach: only for the table."""
    import shlex
    import shutil

    code, out = 0, []
    for part in command.split(" && "):
        stages = [shlex.split(stage) for stage in part.split(" | ")]
        argv = stages[-1]
        target = None
        if ">" in argv:
            target, argv = argv[argv.index(">") + 1], argv[:argv.index(">")]
            stages[-1] = argv
        if len(stages) == 1 and argv[0] in ("echo", "pwd"):
            text = (" ".join(argv[1:]) if argv[0] == "echo" else cwd) + "\n"
            if target:
                Path(target).write_text(text)
            else:
                out.append(text)
            continue
        prev, pids = None, []
        r, w = os.pipe()
        for i, stage in enumerate(stages):
            last = i == len(stages) - 1
            pr, pw = (r, w) if last else os.pipe()
            acts = [(os.POSIX_SPAWN_DUP2, prev, 0)] if prev is not None else [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0)]
            acts += [(os.POSIX_SPAWN_DUP2, pw, 1), (os.POSIX_SPAWN_DUP2, w, 2)]
            pids.append(os.posix_spawn(shutil.which(stage[0]), stage, os.environ, file_actions=acts))
            if prev is not None:
                os.close(prev)
            if not last:
                os.close(pw)
                prev = pr
        os.close(w)
        chunks = []
        while chunk := os.read(r, 1 << 16):
            chunks.append(chunk)
        os.close(r)
        for pid in pids:
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        out.append(b"".join(chunks).decode(errors="replace"))
        if code:
            break
    return code, "".join(out)


def bench_no_shell(repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as cwd:
        old = os.getcwd()
        os.chdir(cwd)
        try:
            cmd_times = time_commands(lambda c: run_without_shell(c, cwd), "no shell", repeats)
        finally:
            os.chdir(old)
    return row(0.0, 0.0, cmd_times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="sandbox start and command latency, ours vs mini-swe-agent")
    ap.add_argument("--task", default=str(REPO / "tasks" / "count-lines"))
    ap.add_argument("--starts", type=int, default=10, help="fresh sessions to time per backend")
    ap.add_argument("--repeats", type=int, default=5, help="passes over the command list")
    ap.add_argument("--backends", default="docker,bwrap,local")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    task = load_task(args.task)

    rows: dict[str, dict] = {}
    backends = args.backends.split(",")
    for backend in backends:
        try:
            rows[backend] = bench_ours(backend, task, args.starts, args.repeats)
        except (SandboxError, ImportError) as e:
            print(f"{backend}: skipped ({e})", file=sys.stderr)
    etc_copied = "local, /etc copied (no overlayfs)"
    if "local" in rows:  # the same backend where overlayfs is missing: its session copies the host's /etc
        from mirl.sandbox import local_backend

        if local_backend.overlay_works():
            local_backend._overlay_ok = False
            try:
                rows[etc_copied] = bench_ours("local", task, args.starts, args.repeats)
            finally:
                local_backend._overlay_ok = True
    mini_docker, mini_bwrap, mini_local = (
        "mini-swe-agent docker (podman CLI)", "mini-swe-agent bubblewrap", "mini-swe-agent local")
    minis = [("docker", mini_docker, lambda: bench_mini_docker(task, args.starts, args.repeats)),
             ("bwrap", mini_bwrap, lambda: bench_mini_bubblewrap(args.repeats)),
             ("local", mini_local, lambda: bench_mini_local(args.repeats))]
    for backend, name, bench in minis:
        if backend not in backends:
            continue
        try:
            rows[name] = bench()
        except ImportError:
            print(f"{name}: skipped (pip install mini-swe-agent)", file=sys.stderr)
        except (SandboxError, subprocess.SubprocessError, OSError, AssertionError) as e:
            print(f"{name}: skipped ({e})", file=sys.stderr)

    floor = "floor: the programs alone, no shell"
    if "local" in backends:
        rows[floor] = bench_no_shell(args.repeats)

    equivalent = {"docker": mini_docker, "bwrap": mini_bwrap, "local": mini_local, floor: mini_local,
                  etc_copied: mini_local}
    equivalent.update({name: name for name in equivalent.values()})
    print(f"\n{len(COMMANDS)} commands x {args.repeats} passes, {args.starts} fresh sessions; medians in ms\n")
    print(f"| {'environment':36} | start ms | close ms | command ms | p90 ms | cached build ms | command vs mini | start vs mini |")
    print(f"| {'-' * 36} | -------- | -------- | ---------- | ------ | --------------- | --------------- | ------------- |")
    for name, row in rows.items():
        ref = rows.get(equivalent.get(name, ""))
        cmd_ratio = f"{row['command_ms'] / ref['command_ms']:.2f}x" if ref else "-"
        start_ratio = f"{row['start_ms'] / ref['start_ms']:.2f}x" if ref and ref["start_ms"] > 1 else "-"
        print(f"| {name:36} | {row['start_ms']:8.0f} | {row['close_ms']:8.0f} | {row['command_ms']:10.1f} | "
              f"{row['command_p90_ms']:6.1f} | {row['cached_build_ms']:15.0f} | {cmd_ratio:>15} | {start_ratio:>13} |")
    ratios = [(ours, ref) for ours, ref in equivalent.items() if ours in rows and ref in rows and ours != ref]
    ratios = [(ours, ref) for ours, ref in ratios if ours != floor] + [(ours, ref) for ours, ref in ratios if ours == floor]
    if ratios:
        print("\nper-command latency, ours / mini-swe-agent's equivalent (target <= 0.50x):")
        for ours, ref in ratios:
            print(f"  {ours:36} vs {ref:36} {rows[ours]['command_ms'] / rows[ref]['command_ms']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
