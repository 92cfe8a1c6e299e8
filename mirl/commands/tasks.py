"""`mirl tasks validate|list|run`: check task directories and run them with trivial agents."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasks", help="validate, list and run terminal tasks")
    tsub = p.add_subparsers(dest="tasks_command", metavar="ACTION", required=True)

    v = tsub.add_parser("validate", help="check task directories; exit 1 naming task, file and field of each problem")
    v.add_argument("paths", nargs="+", help="task directories, or directories holding tasks")
    v.set_defaults(func=_validate)

    ls = tsub.add_parser("list", help="one line per task: id, layout, difficulty, timeouts, solution")
    ls.add_argument("paths", nargs="+")
    ls.add_argument("--json", action="store_true", help="one JSON object per task")
    ls.set_defaults(func=_list)

    r = tsub.add_parser("run", help="run tasks with the oracle (reference solution) or noop agent and verify")
    r.add_argument("paths", nargs="+")
    r.add_argument("--agent", choices=["oracle", "noop"], default="oracle")
    r.add_argument("--sandbox", default="auto", help="auto | docker | bwrap | local (default auto)")
    r.add_argument("--json", action="store_true", help="print one JSON object per task")
    r.set_defaults(func=_run)


def _paths(raw: list[str]):
    """The task directories in `raw`, and each given path that is missing or holds no task, said on stderr."""
    from pathlib import Path

    from mirl.tasks import find_tasks, without_tasks

    found = find_tasks(*raw)
    missing = [p for p in raw if not Path(p).exists()]
    for m in missing:
        print(f"{m}: no such file or directory", file=sys.stderr)
    empty = without_tasks(*raw)
    for e in empty:
        print(f"{e}: no task directories found in it (a task directory has task.toml, task.yaml or "
              "instruction.md)", file=sys.stderr)
    return found, missing + empty


def _validate(args) -> int:
    from mirl.tasks import TaskInvalid, load_task
    from mirl.tasks.loader import display_path

    found, missing = _paths(args.paths)
    bad = 0
    for path in found:
        try:
            task = load_task(path)
        except TaskInvalid as e:
            bad += 1
            for problem in e.problems:
                print(problem, file=sys.stderr)
            continue
        for note in task.notes:  # read but not applied: worth a word, not a failure
            print(f"{display_path(task.path)}: note: {note}", file=sys.stderr)
    print(f"{len(found) - bad} of {len(found)} tasks valid")
    return 1 if bad or missing else 0


def _list(args) -> int:
    from mirl.tasks import TaskInvalid, load_task

    found, missing = _paths(args.paths)
    status = 1 if missing else 0
    for path in found:
        try:
            t = load_task(path)
        except TaskInvalid as e:
            print(f"{e.problems[0].path or path}: invalid ({len(e.problems)} problems; see `mirl tasks validate`)",
                  file=sys.stderr)
            status = 1
            continue
        row = {"task": t.id, "layout": t.layout, "difficulty": t.difficulty, "agent_timeout_s": t.agent_timeout_s,
               "verifier_timeout_s": t.verifier_timeout_s, "solution": t.solution is not None,
               "image": t.image or (f"Dockerfile FROM {_base(t)}")}
        if args.json:
            print(json.dumps(row))
        else:
            limit = f"{t.agent_timeout_s:6.0f}s" if t.agent_timeout_s is not None else "  none "
            print(f"{t.id:45s} {t.layout:14s} {t.difficulty:7s} agent {limit}  "
                  f"{'solution' if t.solution else '-':8s} {row['image']}")
    return status


def _base(task) -> str:
    from mirl.tasks.dockerfile import parse

    return parse(task.dockerfile).base_image


def _run(args) -> int:
    from mirl.sandbox import SandboxConfig, SandboxError, make_sandbox
    from mirl.sandbox.trivial import run_trivial
    from mirl.tasks import TaskInvalid, load_task

    found, missing = _paths(args.paths)
    if missing or not found:
        return 2
    try:
        box = make_sandbox(SandboxConfig(backend=args.sandbox))
    except SandboxError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    status = 0
    for path in found:
        try:
            task = load_task(path)
        except TaskInvalid as e:
            print(str(e), file=sys.stderr)
            status = 1
            continue
        result = run_trivial(task, args.agent, box)
        if result.error:
            status = 1
        if args.json:
            print(json.dumps(result.to_dict()), flush=True)
        else:
            note = f"  ERROR {result.error}" if result.error else (f"  ({result.verifier_error})" if result.verifier_error else "")
            print(f"{task.id:45s} {args.agent:6s} reward={result.reward:g}  {result.duration_s:6.1f}s{note}", flush=True)
    return status
