"""`mirl detect`: run the rule detectors over trajectory files and report flagged steps.

    mirl detect runs/demo/trajectories.jsonl
    mirl detect runs/ --json --detectors broad-kill,binary-as-text
    mirl detect --list
"""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "detect",
        help="flag misbehaviors in trajectory files with the rule detectors",
        description="Run deterministic misbehavior detectors over trajectory files: our JSONL, mini-swe-agent "
        ".traj.json (1.x or 2.x, text or tool calls), JSON lists of chat messages, ATIF trajectory.json files, "
        "Harbor job/trial directories and Terminal-Bench 1 trial directories. Directories are searched "
        "recursively for every known format. Exit status: 0 when every file was read, 2 otherwise.",
    )
    p.add_argument("paths", nargs="*", metavar="FILE", help="trajectory files or directories")
    p.add_argument("--json", action="store_true", help="print one JSON object per flagged step instead of a summary")
    p.add_argument("--detectors", default="", help="comma-separated detector names (default: all; see --list)")
    p.add_argument("--examples", type=int, default=3, help="examples shown per detector in the summary")
    p.add_argument("--list", action="store_true", help="list the detectors with their definitions and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mirl.detectors.catalog import get_detectors, run_detectors
    from mirl.sources import PATTERNS, TrajectoryFileError, find_sources, read_source

    try:
        detectors = get_detectors(args.detectors.split(",") if args.detectors.strip() else None)
    except ValueError as e:
        print(f"mirl detect: {e}", file=sys.stderr)
        return 2
    if args.list:
        for det in detectors:
            print(f"{det.name}\n    {det.definition}\n")
        return 0
    if not args.paths:
        print("mirl detect: give at least one trajectory file or directory (or --list)", file=sys.stderr)
        return 2

    failed = 0
    files = []
    for path in args.paths:
        found = find_sources([path])
        if not found:
            print(f"mirl detect: {path}: no trajectory files or trial directories found "
                  f"(searched for {', '.join(PATTERNS)}, Harbor result.json, Terminal-Bench results.json)",
                  file=sys.stderr)
            failed += 1
        files.extend(found)
    findings, n_traj, n_steps, n_read = [], 0, 0, 0
    affected: dict[str, set] = {d.name: set() for d in detectors}
    for path in files:
        try:
            trajectories = read_source(path)
        except TrajectoryFileError as e:
            print(f"mirl detect: {e}", file=sys.stderr)
            failed += 1
            continue
        n_read += 1
        for k, traj in enumerate(trajectories):
            n_traj += 1
            n_steps += len(traj.steps)
            for f in run_detectors(traj, detectors, file=str(path)):
                findings.append(f)
                affected[f.detector].add((str(path), k))
                if args.json:
                    print(json.dumps(f.to_dict(), ensure_ascii=False))
    if not args.json:
        _summary(findings, affected, detectors, n_read, n_traj, n_steps, args.examples)
    if failed:
        print(f"mirl detect: {failed} path(s) could not be read", file=sys.stderr)
        return 2
    return 0


def _summary(findings, affected, detectors, n_files, n_traj, n_steps, examples) -> None:
    width = max([len(d.name) for d in detectors] + [8])
    print(f"{n_files} file(s), {n_traj} trajectories, {n_steps} steps, {len(findings)} flags")
    print(f"{'detector':<{width}}  {'flags':>5}  {'trajectories':>12}")
    for det in detectors:
        count = sum(1 for f in findings if f.detector == det.name)
        share = f"{len(affected[det.name])}/{n_traj}"
        print(f"{det.name:<{width}}  {count:>5}  {share:>12}")
    if not findings or examples <= 0:
        return
    print("\nexamples:")
    for det in detectors:
        for f in [f for f in findings if f.detector == det.name][:examples]:
            command = " ".join(f.command.split())
            command = command if len(command) <= 60 else command[:57] + "..."
            print(f"  [{det.name}] {f.file} step {f.step}: `{command}`\n      {f.evidence}")
