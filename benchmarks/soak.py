"""python benchmarks/soak.py [--episodes 200] [--workers 8] [--backends docker,bwrap] [--json FILE]

A soak of many parallel episodes per sandbox backend: each episode is the real agent loop
(`run_episode`) driven by the scripted model double of the tests, on a real session, with commands
that exercise the sandbox (files, a background daemon, a SIGTERM-ignoring process, zombies, an
output flood, a command killed at its timeout), then verified. Before the batch a warm-up of
`workers` episodes fills the engine client's connection pool; a census of the host
(`mirl.sandbox.leaks`: containers, temp dirs, cgroups, mounts, loop devices, processes, fds)
taken then is diffed with one taken after every episode closed. Prints, per backend,
episodes/min, rewards, errors and the leaks found (expected: 0). The reliability suite runs
the same soak in a short form (tests/reliability/test_soak_short.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mirl.agent.config import AgentConfig  # noqa: E402
from mirl.agent.episode import run_episode  # noqa: E402
from mirl.sandbox.base import SandboxConfig  # noqa: E402
from mirl.sandbox.leaks import census, settled_leaks  # noqa: E402
from mirl.tasks import load_task  # noqa: E402
from tests.agent.agent_doubles import SUBMIT, Scripted, bash, write_hello_task  # noqa: E402

COMMAND_TIMEOUT_S = 1.0  # the episode's `sleep 3` is killed at it
STORAGE_MB = 10240  # as every TermiGen task asks: bwrap sessions get their bounded disk
# What every episode runs; the last command writes what the task's test checks.
COMMANDS = [
    "ls -la /app && echo start > /app/log.txt",
    "setsid sleep 300 > /dev/null 2>&1 < /dev/null &",  # a daemon left running at close
    "trap '' TERM HUP; (trap '' TERM HUP; exec sleep 300) > /dev/null 2>&1 &",  # ignores SIGTERM
    "(sh -c 'sleep 0 & sleep 0 & exec sleep 300' &) ; sleep 0.2",  # a parent that never reaps: zombies
    "python3 -c \"print('x' * 300000)\"",  # more output than the cap
    "sleep 3",  # killed at the command timeout
    "printf hi > /app/hello.txt && cat /app/hello.txt",
]
# pool size of the docker SDK's connection pool: a census may see it grown after the warm-up
ENGINE_POOL_SLACK = 10


@dataclass
class SoakResult:
    backend: str
    episodes: int
    workers: int
    wall_s: float
    rewards: dict[str, int] = field(default_factory=dict)  # reward -> count
    errors: list[str] = field(default_factory=list)  # episodes that did not submit, with their error
    leaks: dict[str, list[str]] = field(default_factory=dict)

    @property
    def per_min(self) -> float:
        return 60.0 * self.episodes / self.wall_s if self.wall_s else 0.0

    @property
    def leak_count(self) -> int:
        return sum(len(v) for v in self.leaks.values())

    def line(self) -> str:
        rewards = ", ".join(f"{k}: {v}" for k, v in sorted(self.rewards.items()))
        return (f"{self.backend:7s} {self.episodes:4d} episodes  {self.workers} workers  {self.wall_s:7.1f} s  "
                f"{self.per_min:6.1f} episodes/min  rewards {{{rewards}}}  errors {len(self.errors)}  "
                f"leaks found {self.leak_count}")


def make_sandbox(backend: str):
    """A sandbox of `backend`, as the soak drives it (SandboxError when it cannot run here)."""
    from mirl.sandbox.select import make_sandbox as make

    return make(SandboxConfig(backend=backend))


def play(sandbox, task, seed: int):
    """One scripted episode: the sandbox-exercising commands, then submit."""
    model = Scripted([bash(c) for c in COMMANDS] + [SUBMIT])
    config = AgentConfig(command_timeout_s=COMMAND_TIMEOUT_S, max_steps=len(COMMANDS) + 2, token_ids=False)
    return run_episode(task, sandbox, model, config, seed=seed)


def soak(backend: str, episodes: int, workers: int, root: Path | None = None) -> SoakResult:
    """Run `episodes` episodes on `workers` threads against one backend; census before and after."""
    sandbox = make_sandbox(backend)
    client = getattr(sandbox, "client", None)
    with tempfile.TemporaryDirectory(prefix="soak-task-") as tmp:
        task = load_task(write_hello_task(Path(root or tmp), storage_mb=STORAGE_MB))
        with ThreadPoolExecutor(workers, thread_name_prefix=f"soak-{backend}") as pool:
            # warm-up: builds the task's image or layer and fills the engine's connection pool
            list(pool.map(lambda i: play(sandbox, task, -1 - i), range(workers)))
            before = census(client)
            t0 = time.monotonic()
            trajs = list(pool.map(lambda i: play(sandbox, task, i), range(episodes)))
            wall = time.monotonic() - t0
        leaks = settled_leaks(before, client, within_s=20, socket_slack=ENGINE_POOL_SLACK if client else 0)
    result = SoakResult(backend, episodes, workers, wall, leaks=leaks)
    for t in trajs:
        key = str(t.reward)
        result.rewards[key] = result.rewards.get(key, 0) + 1
        if t.exit_reason != "submitted" or t.error:
            result.errors.append(f"seed {t.seed}: {t.exit_reason} {t.error or ''}".strip())
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--backends", default="docker,bwrap")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    results = []
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        r = soak(backend, args.episodes, args.workers)
        results.append(r)
        print(r.line(), flush=True)
        for kind, items in r.leaks.items():
            for item in items[:10]:
                print(f"    leaked {kind}: {item}")
        for e in r.errors[:5]:
            print(f"    error: {e}")
    if args.json:
        args.json.write_text(json.dumps([{**r.__dict__, "episodes_per_min": round(r.per_min, 2),
                                          "leaks_found": r.leak_count} for r in results], indent=1) + "\n")
    return 0 if all(r.leak_count == 0 and not r.errors for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
