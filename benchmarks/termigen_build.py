"""python benchmarks/termigen_build.py [TASKS_DIR] [--out DIR] [--limit N] [--retry-failed]

Builds every task of an external task collection (default: ../shared/external/termigen next to
the repository) with the docker backend and verifies each untouched environment, which must
score 0 (the task is not already solved). Reports how many build, how many verify to 0, and the
failure reason per task. Resumable: results are appended to DIR/results.jsonl and tasks found
there are skipped; DIR/report.json and DIR/report.md are rewritten after every task.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mirl.sandbox.base import SandboxConfig, SandboxError  # noqa: E402
from mirl.tasks import TaskInvalid, find_tasks, load_task  # noqa: E402


def classify(error: str) -> str:
    """One short reason out of a build log, for the summary table."""
    m = re.search(r"apt packages not found on the base image's distribution: (.*)", error)
    if m:
        return f"apt package missing on Debian: {m.group(1).strip()}"
    for pattern, label in [
        (r"No matching distribution found for (\S+)", "pip: no distribution for {}"),
        (r"Could not find a version that satisfies the requirement (\S+)", "pip: no version of {}"),
        (r"externally-managed-environment", "pip: externally managed environment"),
        (r"Temporary failure resolving|Could not resolve", "network: name resolution failed"),
        (r"E: Package '([^']+)' has no installation candidate", "apt: no candidate for {}"),
        (r"error: command '([^']+)' failed", "compile failed: {}"),
    ]:
        m = re.search(pattern, error)
        if m:
            return label.format(*m.groups())
    first = error.strip().splitlines()[0] if error.strip() else "unknown"
    return first[:160]


def run_one(sandbox, path: Path) -> dict:
    row: dict = {"task": path.name, "loaded": False, "built": False, "reward": None, "reason": ""}
    try:
        task = load_task(path)
    except TaskInvalid as e:
        row["reason"] = f"invalid task: {e}"
        return row
    row["loaded"] = True
    t0 = time.monotonic()
    try:
        row["image"] = sandbox.image_for(task)
        row["built"] = True
    except SandboxError as e:
        row["reason"] = classify(str(e))
        row["error"] = str(e)[-3000:]
        return row
    finally:
        row["build_s"] = round(time.monotonic() - t0, 1)
    t1 = time.monotonic()
    try:
        with sandbox.start(task) as session:
            row["start_s"] = round(time.monotonic() - t1, 3)
            result = session.verify()
    except SandboxError as e:
        row["reason"] = f"start/verify failed: {e}"
        return row
    row["verify_s"] = round(result.duration_s, 1)
    row["reward"] = result.reward
    row["verify_exit"] = result.exit_code
    if result.error:
        row["reason"] = f"verifier error: {result.error}"
    elif result.reward != 0:
        row["reason"] = f"untouched environment scores {result.reward}"
    if row["reason"]:
        row["verifier_tail"] = result.tail[-2000:]
    return row


def write_report(out: Path, rows: list[dict], total: int, tasks_dir: Path) -> dict:
    built = sum(r["built"] for r in rows)
    zero = sum(r["reward"] == 0 and not r["reason"] for r in rows)
    reasons = Counter(r["reason"] for r in rows if r["reason"])
    summary = {
        "tasks_dir": str(tasks_dir), "tasks": total, "done": len(rows),
        "loaded": sum(r["loaded"] for r in rows), "built": built, "verify_zero_untouched": zero,
        "build_s_total": round(sum(r.get("build_s", 0) for r in rows), 1),
        "reasons": dict(reasons.most_common()),
    }
    (out / "report.json").write_text(json.dumps({"summary": summary, "tasks": rows}, indent=1))
    lines = [
        f"# Building and verifying {tasks_dir.name} untouched", "",
        f"{summary['done']} of {total} tasks done: {summary['loaded']} load, {built} build, "
        f"{zero} verify to 0 untouched (total build time {summary['build_s_total']:.0f} s).", "",
        "| task | built | build s | reward | reason |", "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        reason = r["reason"].replace("|", "/").replace("\n", " ")[:200]
        lines.append(f"| {r['task']} | {'yes' if r['built'] else 'no'} | {r.get('build_s', '')} | "
                     f"{'' if r['reward'] is None else r['reward']} | {reason} |")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[2])
    ap.add_argument("tasks_dir", nargs="?", default=str(REPO.parent / "shared" / "external" / "termigen"))
    ap.add_argument("--out", default=str(REPO / "reports" / "termigen_build"), help="results directory")
    ap.add_argument("--limit", type=int, default=0, help="stop after this many new tasks (0 = all)")
    ap.add_argument("--retry-failed", action="store_true", help="run again tasks whose earlier result failed")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    tasks_dir = Path(args.tasks_dir)
    paths = find_tasks(tasks_dir)
    if not paths:
        print(f"error: no tasks found in {tasks_dir}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    done: dict[str, dict] = {}
    if results.exists():
        for line in results.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["task"]] = row
    if args.retry_failed:
        done = {k: v for k, v in done.items() if not v["reason"]}
        results.write_text("".join(json.dumps(r) + "\n" for r in done.values()))

    from mirl.sandbox.docker_backend import DockerSandbox

    sandbox = DockerSandbox(SandboxConfig(backend="docker"))
    new = 0
    for path in paths:
        if path.name in done:
            continue
        if args.limit and new >= args.limit:
            break
        t0 = time.monotonic()
        row = run_one(sandbox, path)
        new += 1
        done[path.name] = row
        with results.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"[{len(done)}/{len(paths)}] {path.name}: built={row['built']} reward={row['reward']} "
              f"{row['reason'][:120]} ({time.monotonic() - t0:.0f} s)", flush=True)
        write_report(out, [done[p.name] for p in paths if p.name in done], len(paths), tasks_dir)
    summary = write_report(out, [done[p.name] for p in paths if p.name in done], len(paths), tasks_dir)
    print(json.dumps({k: v for k, v in summary.items() if k != "reasons"}))
    for reason, n in summary["reasons"].items():
        print(f"  {n:3d}  {reason[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
