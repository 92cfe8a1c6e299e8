"""`mirl train --params FILE [--name RUN] [-p SECTION.KEY=VALUE ...] [--force] [--check]`: the training stage."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="RL from misbehavior prefixes (or a baseline recipe) on a run's prefixes")
    p.add_argument("--params", required=True, help="params YAML, e.g. params/train/paper.yaml or params/train/demo.yaml")
    p.add_argument("--name", default="demo", help="run name: reads and writes runs/NAME")
    p.add_argument("--runs", default="runs", help="directory holding the runs")
    p.add_argument("-p", "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one parameter, e.g. training.steps=2")
    p.add_argument("--force", action="store_true", help="discard this run's training outputs and start over")
    p.add_argument("--check", action="store_true", help="validate the params and print the estimate; train nothing")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_train)


def _train(args) -> int:
    from pathlib import Path

    from mirl.params import load
    from mirl.runner.fingerprint import ParamsMismatch
    from mirl.runner.stage import StageError
    from mirl.training.estimate import estimate
    from mirl.training.stage import TrainingStage, run_training
    from mirl.typed import ParamsError

    try:
        params = load(args.params, args.overrides)
        TrainingStage(params, Path(args.runs) / args.name)  # validates the training section
    except (ParamsError, StageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("estimate: " + json.dumps(estimate(params)))
    if args.check:
        return 0
    try:
        summary = run_training(params, Path(args.runs) / args.name, force=args.force, progress=not args.quiet)
    except (ParamsMismatch, StageError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: summary[k] for k in ("recipe", "done", "steps", "complete", "stopped", "selected",
                                              "rollouts", "mean_dead_share", "elapsed_s")}))
    return 0 if summary["complete"] else 1
