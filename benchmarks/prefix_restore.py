"""python benchmarks/prefix_restore.py [--lengths 1,5,20] [--repeats 5] [--backends docker,bwrap] [--write-mb 0]

Restoring a prefix by rerunning its commands in a fresh sandbox vs by a snapshot (`mirl.sandbox.snapshot`),
per backend, side by side in one run. For prefixes of each length (commands that write, append, run
python and read files, as an agent's do):

- rerun: a fresh session started and the prefix's commands run (what the prefix stage's rerun
  check does, and what each RL start costs without snapshots);
- save: `session.snapshot()` at the end of the prefix (paid once per prefix);
- restore: `sandbox.start(task, snapshot=handle)` until the session is ready (paid per RL start);
- ratio: rerun / restore.

Each repeat checks that the restored session sees the prefix's files. The commands here are cheap
(milliseconds), so rerun times are a floor: a real prefix that builds or tests code reruns those
too, while a restore costs the same. `--write-mb N` adds a first command writing N MB, to show how
save and restore grow with the files changed. Medians over the repeats, in ms; run on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mirl.sandbox import SandboxConfig, SandboxError, make_sandbox  # noqa: E402
from mirl.tasks import load_task  # noqa: E402


def write_task(root: Path) -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "environment" / "Dockerfile").write_text("FROM mirl-base\nWORKDIR /app\n")
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n")
    (root / "instruction.md").write_text("Benchmark task.\n")
    (root / "task.toml").write_text("[verifier]\ntimeout_sec = 60.0\n")
    return root


def prefix(n: int, write_mb: int = 0) -> list[str]:
    """`n` commands of the kinds an agent runs: make files, run python, append outside /app, read."""
    kinds = [
        "mkdir -p src/m{i} && printf 'def f():\\n    return {i}\\n' > src/m{i}/mod.py",
        "python3 -c 'import json; print(json.dumps({{\"i\": {i}}}))' > out{i}.json && cat out{i}.json",
        "echo line{i} >> /etc/mirl-bench.conf && wc -l < /etc/mirl-bench.conf",
        "ls -la src | tail -3",
        "grep -rn return src | wc -l",
    ]
    commands = [f"head -c {write_mb}M /dev/urandom > blob.bin"] if write_mb else []
    return commands + [kinds[i % len(kinds)].format(i=i) for i in range(n - len(commands))]


def probe(commands: list[str]) -> tuple[str, str]:
    """A command reading what `commands` wrote, and what it must print."""
    mods = sum("mkdir -p src/" in c for c in commands)
    lines = sum("mirl-bench.conf" in c for c in commands)
    return "ls src 2>/dev/null | wc -l; cat /etc/mirl-bench.conf 2>/dev/null | wc -l", f"{mods}\n{lines}\n"


def ms(values: list[float]) -> float:
    return 1000 * statistics.median(values)


def bench(sandbox, task, n: int, repeats: int, write_mb: int) -> dict:
    commands = prefix(n, write_mb)
    check, expected = probe(commands)
    rerun, save, restore, per_command = [], [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        with sandbox.start(task) as s:
            for c in commands:
                t1 = time.perf_counter()
                r = s.run(c, timeout=120)
                per_command.append(time.perf_counter() - t1)
                assert r.exit_code == 0, f"{c!r}: {r.output}"
            rerun.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            handle = s.snapshot()
            save.append(time.perf_counter() - t0)
        try:
            t0 = time.perf_counter()
            with sandbox.start(task, snapshot=handle) as restored:
                restore.append(time.perf_counter() - t0)
                out = restored.run(check, timeout=60).output
                assert out == expected, f"{sandbox.name}: the restored session printed {out!r}, not {expected!r}"
        finally:
            sandbox.drop_snapshot(handle)
    return {"backend": sandbox.name, "commands": len(commands), "rerun_ms": ms(rerun), "save_ms": ms(save),
            "restore_ms": ms(restore), "command_ms": ms(per_command), "ratio": statistics.median(rerun) / statistics.median(restore)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="prefix restore: rerun vs snapshot save and restore, per backend")
    ap.add_argument("--lengths", default="1,5,20", help="prefix lengths in commands")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--backends", default="docker,bwrap")
    ap.add_argument("--write-mb", type=int, default=0, help="a first command writes this many MB (0: none)")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    lengths = [int(x) for x in args.lengths.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        task = load_task(write_task(Path(tmp) / "prefix-restore-bench"))
        for backend in args.backends.split(","):
            try:
                sandbox = make_sandbox(SandboxConfig(backend=backend))
                with sandbox.start(task) as s:  # builds the task's image or layer once, outside the timings
                    s.run("true")
            except SandboxError as e:
                print(f"{backend}: skipped ({e})", file=sys.stderr)
                continue
            for n in lengths:
                rows.append(bench(sandbox, task, n, args.repeats, args.write_mb))
    extra = f", a first command writing {args.write_mb} MB" if args.write_mb else ""
    print(f"\nprefix restore, medians of {args.repeats} in ms{extra}\n")
    print("| backend | commands | command ms | rerun ms | save ms | restore ms | rerun / restore | rerun / (save + restore) |")
    print("| ------- | -------- | ---------- | -------- | ------- | ---------- | --------------- | ------------------------ |")
    for r in rows:
        print(f"| {r['backend']:7} | {r['commands']:8} | {r['command_ms']:10.1f} | {r['rerun_ms']:8.0f} | {r['save_ms']:7.0f} | "
              f"{r['restore_ms']:10.0f} | {r['ratio']:14.2f}x | {r['rerun_ms'] / (r['save_ms'] + r['restore_ms']):23.2f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
