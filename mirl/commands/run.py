"""`mirl run NOTEBOOK... --params FILE [--name RUN] [-p SECTION.KEY=VALUE ...] [--force]`: stage notebooks, headless."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="execute stage notebooks headless with papermill")
    p.add_argument("notebooks", nargs="+", help="notebooks to run, in order (e.g. notebooks/*.ipynb)")
    p.add_argument("--params", help="params YAML: shared sections, then one per stage (params/demo.yaml, params/paper.yaml)")
    p.add_argument("--name", default="demo", help="run name: data in runs/NAME, reports in reports/NAME")
    p.add_argument("-p", "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one parameter, e.g. profiling.max_tasks=3 or models.policy.temperature=1.0")
    p.add_argument("--force", action="store_true", help="overwrite stage outputs that were made with other params")
    p.add_argument("--kernel", default="", help="Jupyter kernel (default: `mirl`, registered by scripts/setup.sh, else python3)")
    p.add_argument("--cell-timeout", type=int, default=3600, help="seconds a cell may run")
    p.add_argument("--check", action="store_true", help="only validate parameters, run nothing")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from pathlib import Path

    from mirl.notebook import RunSpec, execute, resolve_parameters
    from mirl.params import parse_overrides
    from mirl.typed import ParamsError

    try:
        overrides = parse_overrides(args.overrides)
    except ParamsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    specs = []
    for nb in args.notebooks:
        path = Path(nb)
        if not path.is_file():
            print(f"error: no such notebook: {nb}", file=sys.stderr)
            return 2
        spec = RunSpec(notebook=path, run_name=args.name, params_file=Path(args.params) if args.params else None,
                       overrides=overrides, kernel=args.kernel, cell_timeout_s=args.cell_timeout, force=args.force)
        try:
            resolve_parameters(spec)
        except (ParamsError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)  # each names its file: the params, a base of it, or the notebook
            return 2
        specs.append(spec)
    if args.check:
        print(f"parameters valid for {len(specs)} notebook(s)")
        return 0
    import papermill

    for spec in specs:
        try:
            out = execute(spec)
        except papermill.PapermillExecutionError as e:
            print(f"error: {spec.notebook} failed in cell {e.exec_count}: {e.ename}: {e.evalue}", file=sys.stderr)
            print(f"the partly executed notebook is in reports/{spec.run_name}/", file=sys.stderr)
            return 1
        print(f"{spec.notebook} -> {out}")
    return 0
