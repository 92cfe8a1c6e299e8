"""`mirl batch --params FILE [--name RUN] [--from STAGE] [--to STAGE] [--recipes NAME,..] [--parallel N] [--force] [--check]`: the whole pipeline,
resumable; `--check` validates it and prints the evaluation's design instead."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("batch", help="run the pipeline's stage notebooks in order, headless; resumes where it stopped",
                       description="Run notebooks/NN_*.ipynb in order with papermill; a stage already complete "
                                   "with the same params is skipped, the first failure stops the batch.")
    p.add_argument("--params", help="params YAML: shared sections, then one per stage (params/demo.yaml)")
    p.add_argument("--name", default="demo", help="run name: data in runs/NAME, reports in reports/NAME")
    p.add_argument("--from", dest="first", metavar="STAGE", help="first stage to run: a name or number (02, taxonomy), or one recipe's training (training:mirl)")
    p.add_argument("--to", dest="last", metavar="STAGE", help="last stage to run: a name or number, or one recipe's training (training:tmax)")
    p.add_argument("--recipes", metavar="NAME[,NAME]", help="train only these recipes (the others' training is "
                                                            "left out of the --from/--to range; stages after it "
                                                            "still evaluate every recipe that has a checkpoint)")
    p.add_argument("--parallel", type=int, default=1, metavar="N",
                   help="train up to N recipes at once, each in a process of its own (default 1: one after "
                        "another); on one GPU a small policy's training leaves most of the device idle")
    p.add_argument("-p", "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one parameter, e.g. profiling.max_tasks=3")
    p.add_argument("--force", action="store_true", help="overwrite stage outputs that were made with other params")
    p.add_argument("--notebooks", default="notebooks", help="directory of the stage notebooks (default notebooks)")
    p.add_argument("--kernel", default="", help="Jupyter kernel (default: `mirl`, registered by scripts/setup.sh, "
                                                "else python3)")
    p.add_argument("--cell-timeout", type=int, default=3600, help="seconds a cell may run (default 3600)")
    p.add_argument("--check", action="store_true", help="validate every stage's params and print the evaluation's "
                                                        "design (the smallest reduction it detects); run nothing")
    p.add_argument("--rates-from", metavar="RUN_DIR", help="with --check: the earlier run whose base-policy rates "
                                                           "size the design (default: this run's, else a prior)")
    p.set_defaults(func=_batch)


def _batch(args) -> int:
    from pathlib import Path

    from mirl.batch import BatchError, BatchSpec, run_batch
    from mirl.params import parse_overrides
    from mirl.typed import ParamsError

    if args.parallel < 1:
        print(f"error: --parallel {args.parallel}: give 1 or more recipes at once", file=sys.stderr)
        return 2
    try:
        spec = BatchSpec(params_file=Path(args.params) if args.params else None, run_name=args.name,
                         overrides=parse_overrides(args.overrides), notebooks_dir=Path(args.notebooks),
                         kernel=args.kernel, cell_timeout_s=args.cell_timeout, force=args.force,
                         first=args.first, last=args.last, parallel=args.parallel,
                         recipes=[n.strip() for n in args.recipes.split(",") if n.strip()] if args.recipes else None)
        if args.check:
            from mirl.batch import check_batch

            print("\n".join(check_batch(spec, args.rates_from)))
            return 0
        outcome = run_batch(spec)
    except (ParamsError, BatchError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not outcome.ok:
        print(outcome.message, file=sys.stderr)
        return 1
    return 0
