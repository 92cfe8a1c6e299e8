"""`mirl rollout`: play a policy on tasks in parallel; rerunning resumes where a run stopped.

    mirl rollout --tasks tasks --model local/smollm2 --sandbox auto --seeds 2 --out runs/demo --workers 2
    mirl rollout export runs/demo/trajectories.jsonl --to runs/demo/traj   # mini-swe-agent files
    mirl rollout export runs/demo/trajectories.jsonl --to runs/demo/atif --format atif
    mirl rollout import DIR_OR_FILES --to runs/imported/trajectories.jsonl  # any format mirl detect reads
"""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rollout", help="play a policy on tasks (resumable), or convert trajectories",
                       description="Play every (task, seed) pair not yet in OUT/trajectories.jsonl.")
    p.add_argument("--params", help="params YAML (its models, sandbox and agent sections; flags below override it)")
    p.add_argument("-p", "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one parameter of the params file, e.g. models.policy.temperature=1.0")
    p.add_argument("--force", action="store_true", help="overwrite a run in OUT that was made with other params")
    p.add_argument("--tasks", nargs="+", help="task directories or directories holding tasks (default: tasks)")
    p.add_argument("--task", dest="task_ids", action="append", help="only this task id (repeatable)")
    p.add_argument("--model", help="policy model, e.g. local/smollm2, hosted_vllm/<id>, openai/<id>")
    p.add_argument("--api-base", help="server URL for the policy (vLLM / OpenAI-compatible)")
    p.add_argument("--sandbox", help="auto | docker | bwrap | local (default auto)")
    p.add_argument("--seeds", type=int, help="episodes per task (default 2)")
    p.add_argument("--out", help="run directory (default runs/rollout)")
    p.add_argument("--workers", type=int, help="episodes at once (default 1)")
    p.add_argument("--max-steps", type=int, help="step limit per episode (default 64)")
    p.add_argument("--action-format", choices=["text", "tool"], help="```bash block (text) or bash tool call")
    p.add_argument("--ray", dest="ray_address", help="Ray cluster address; episodes run as Ray tasks")
    p.add_argument("--retry-errors", action="store_true", help="replay episodes that ended in an error")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_rollout)
    # conversions: `mirl rollout export|import ...`
    p.add_argument("convert", nargs="*", metavar="export|import PATH",
                   help="`export JSONL --to DIR` writes *.traj.json (or ATIF); `import PATH... --to JSONL` reads "
                        "every format `mirl detect` reads")
    p.add_argument("--to", help="destination of export/import")
    p.add_argument("--format", dest="export_format", choices=["miniswe", "atif"], default="miniswe",
                   help="export format: mini-swe-agent .traj.json (default) or ATIF .trajectory.json")


def _overrides(args) -> tuple[dict, dict]:
    o: dict = {}
    for name in ("tasks", "task_ids", "model", "seeds", "out", "workers", "ray_address"):
        v = getattr(args, name)
        if v is not None:
            o[name] = v
    if args.retry_errors:
        o["retry_errors"] = True
    if args.no_progress:
        o["progress"] = False
    agent = {k: v for k, v in (("max_steps", args.max_steps), ("action_format", args.action_format)) if v is not None}
    return o, agent


def _rollout(args) -> int:
    if args.convert:
        return _convert(args)
    from mirl import params as pipeline
    from mirl.agent.rollout import RolloutConfig, RolloutError, run_rollouts
    from mirl.runner import ParamsMismatch
    from mirl.sandbox.base import SandboxError
    from mirl.typed import ParamsError, build

    overrides, agent = _overrides(args)
    try:
        shared = pipeline.load(args.params, args.overrides)
        config = build(RolloutConfig, overrides)
        config.llm, config.agent, config.sandbox = shared.models, shared.agent, shared.sandbox
        for k, v in agent.items():
            setattr(config.agent, k, v)
        if args.sandbox:
            config.sandbox.backend = args.sandbox
        if args.api_base:
            config.llm.policy.api_base = args.api_base
        if config.seeds < 1 or config.workers < 1 or config.agent.max_steps < 1:
            raise ParamsError("seeds, workers and max-steps must be at least 1")
        result = run_rollouts(config, force=args.force)
    except (ParamsError, ParamsMismatch, RolloutError, SandboxError, FileNotFoundError) as e:
        print(f"mirl rollout: {e}", file=sys.stderr)
        return 2
    s = result.summary()
    print(f"{s['played']} episode(s) played, {s['skipped']} already done of {s['planned']}; "
          f"exit reasons {s['exit_reasons']}; mean reward {s['mean_reward']}; -> {s['path']}")
    if s["stopped"]:
        print(f"mirl rollout: not complete: {s['stopped']}", file=sys.stderr)
        return 1
    return 0


def _convert(args) -> int:
    from pathlib import Path

    from mirl.agent.miniswe import save_traj_json
    from mirl.jsonl import JsonlWriter
    from mirl.records.trajectory import RecordError, load_trajectories
    from mirl.sources import TrajectoryFileError, find_sources, read_source
    from mirl.sources.atif import to_atif

    action, *paths = args.convert
    if action not in ("export", "import") or not paths or not args.to:
        print("mirl rollout: use `export JSONL --to DIR` or `import PATH... --to JSONL`", file=sys.stderr)
        return 2
    if action == "export":
        n, every = 0, []
        for p in paths:  # every file read (and checked) before anything is written
            if not Path(p).is_file():
                print(f"mirl rollout: no such file: {p}", file=sys.stderr)
                return 2
            try:
                every += load_trajectories(p)
            except RecordError as e:
                print(f"mirl rollout: {e} (export reads mirl's own trajectories.jsonl; `mirl rollout import` "
                      "reads the other formats)", file=sys.stderr)
                return 2
        for t in every:
            name = f"{t.task}.seed{t.seed}"
            if args.export_format == "atif":
                out = Path(args.to) / f"{name}.trajectory.json"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(to_atif(t), indent=2))
            else:
                save_traj_json(t, Path(args.to) / f"{name}.traj.json")
            n += 1
        kind = "ATIF" if args.export_format == "atif" else "mini-swe-agent"
        print(f"wrote {n} {kind} trajectory file(s) to {args.to}")
        return 0
    from mirl.jsonl import read_jsonl

    def key(record: dict) -> str:
        return json.dumps(record, sort_keys=True, default=str)

    # an import into a file that has records appends: the same trajectory imported again is not added twice
    have = {key(r) for r in read_jsonl(args.to)[0]}
    n, failed, already = 0, 0, 0
    with JsonlWriter(args.to) as w:
        for f in find_sources(paths):
            try:
                trajectories = read_source(f)
            except TrajectoryFileError as e:
                print(f"skipped {e}", file=sys.stderr)
                failed += 1
                continue
            for t in trajectories:
                source = t.meta.pop("source_file", None)
                t.meta.pop("line", None)
                if "imported_from" in t.meta and source:  # a file another tool wrote: say which
                    t.meta["imported_file"] = source
                record = t.to_dict()
                if key(record) in have:
                    already += 1
                    continue
                have.add(key(record))
                w.append(record)
                n += 1
    print(json.dumps({"imported": n, "skipped": failed, "already_there": already, "to": args.to}))
    if failed and not n and not already:  # nothing read: a script chaining this must not go on as if it had
        print(f"mirl rollout import: none of the {failed} file(s) could be read (reasons above)", file=sys.stderr)
        return 1
    return 0
