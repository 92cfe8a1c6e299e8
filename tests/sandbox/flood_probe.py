"""python flood_probe.py BACKEND COMMAND OUTPUT_LIMIT pid1|exec: one command in a fresh session.

Prints one JSON line: the result, and how much this process's peak RSS grew during the command.
Run by `conftest.flood_in_fresh_process`, in a fresh interpreter so the peak starts low.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

from mirl.sandbox.base import SandboxConfig
from mirl.sandbox.select import make_sandbox
from mirl.tasks import load_task

TASK = Path(__file__).resolve().parents[1] / "data" / "tasks" / "contract-basic"


def main(backend: str, command: str, limit: str, mode: str) -> None:
    config = SandboxConfig(backend=backend, output_limit=int(limit))
    if backend == "docker":
        from mirl.sandbox.docker_backend import DockerSandbox

        sandbox = DockerSandbox(config, use_pid1=mode == "pid1")
    else:
        sandbox = make_sandbox(config)
    with sandbox.start(load_task(TASK)) as s:
        s.run("true")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        r = s.run(command, timeout=120)
        grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"output": r.output, "exit_code": r.exit_code, "timed_out": r.timed_out,
                      "truncated": r.truncated, "grown_mb": grown_kb / 1024}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
