"""Small-scale MiRL on one GPU: profile, taxonomy, prefixes, three training recipes, evaluation.

    python scripts/small_scale.py run --work WORK [--deadline-s 540]     # every phase, resumable
    python scripts/small_scale.py summarize --work WORK --docs docs/small_scale

`run` goes through the phases in order and skips finished ones; each phase is a child process
(one policy engine per process: training updates the process-wide engine's weights in place, so
recipes never share one). A phase still running at the deadline is stopped; the next `run`
continues it (stages resume by item, training from its last checkpoint). Wall time per phase is
added to WORK/times.json. `summarize` reads the finished run and writes the tables and figures.

Layout under WORK: runs/small (profiling, taxonomy, prefixes, misbehavior_rate), runs/small-RECIPE
(training of each recipe, with copies of the three input stages), tasks (a link to the bundled suite).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PARAMS = HERE / "params" / "small_scale"
RECIPES = ["mirl", "outcome-prefix", "tmax"]
BASE_RUN = "small"
INPUTS = ("profiling", "taxonomy", "prefixes")


def overrides() -> list[str]:
    """SECTION.KEY=VALUE overrides of every phase (`run -p ...`; e.g. a tiny smoke run on a CPU)."""
    return json.loads(os.environ.get("SMALL_SCALE_OVERRIDES") or "[]")


def run_dir(work: Path, recipe: str | None = None) -> Path:
    return work / "runs" / (BASE_RUN if recipe is None else f"{BASE_RUN}-{recipe}")


def complete(stage_dir: Path) -> bool:
    f = stage_dir / "summary.json"
    return f.exists() and bool(json.loads(f.read_text()).get("complete"))


def final_checkpoint(work: Path, recipe: str) -> Path | None:
    from mirl.training import checkpoints as ckpt

    found = ckpt.latest(run_dir(work, recipe) / "training" / "checkpoints")
    return None if found is None else found[1]


# --- phases (each runs in a child process) ------------------------------------------------------


def phase_prep(work: Path) -> None:
    from mirl import params
    from mirl.prefixes.stage import run_prefixes
    from mirl.profiling.stage import run_profiling
    from mirl.taxonomy.stage import run_taxonomy

    p = params.load(PARAMS / "base.yaml", overrides())
    rd = run_dir(work)
    for name, fn in (("profiling", run_profiling), ("taxonomy", run_taxonomy), ("prefixes", run_prefixes)):
        t0 = time.perf_counter()
        s = fn(p, rd)
        print(f"{name}: {time.perf_counter() - t0:.1f} s", {k: v for k, v in s.items()
                                                            if k not in ("llm", "per_misbehavior")}, flush=True)


def phase_train(work: Path, recipe: str) -> None:
    from mirl import params
    from mirl.training.stage import run_training

    rd = run_dir(work, recipe)
    for stage in INPUTS:  # the shared inputs, copied once (the stage checks their digests)
        if not (rd / stage).exists():
            shutil.copytree(run_dir(work) / stage, rd / stage)
    p = params.load(PARAMS / f"{recipe}.yaml", overrides())
    s = run_training(p, rd)
    print(recipe, {k: v for k, v in s.items() if k != "llm"}, flush=True)


def phase_eval(work: Path, with_recipes: bool = True) -> None:
    from dataclasses import replace

    from mirl import params
    from mirl.engines import embedded, registry
    from mirl.evaluate.misbehavior_rate import run_misbehavior_rate

    p = params.load(PARAMS / "base.yaml", overrides())
    policies = ["base"]
    for recipe in RECIPES if with_recipes else []:
        where = final_checkpoint(work, recipe)
        if where is None:  # a later run with it extends the stage (policies are record keys)
            print(f"eval: recipe {recipe} has no checkpoint yet; left out", flush=True)
            continue
        # served under its own path: `local/<dir>` then decodes through the embedded engine's
        # batcher (concurrent continuations share each decode step), as the base policy does
        registry.serve(str(where), embedded.EmbeddedLM(where))
        policies.append(f"local/{where}")
    p = replace(p, misbehavior_rate=replace(p.misbehavior_rate, policies=policies))
    s = run_misbehavior_rate(p, run_dir(work))
    print({k: v for k, v in s.items() if k not in ("llm", "labels")}, flush=True)
    if s.get("complete"):
        (run_dir(work) / "misbehavior_rate" / f".done-{len(policies)}").write_text(json.dumps(policies))


# the base policy is evaluated before training (it checks the evaluation early; the final eval extends it)
PHASES = ["prep", "eval:base", *(f"train:{r}" for r in RECIPES), "eval"]


def done(work: Path, phase: str) -> bool:
    if phase == "prep":
        return all(complete(run_dir(work) / s) for s in INPUTS)
    if phase.startswith("train:"):
        return complete(run_dir(work, phase.split(":", 1)[1]) / "training")
    n = 1 if phase == "eval:base" else 1 + len(RECIPES)
    return (run_dir(work) / "misbehavior_rate" / f".done-{n}").exists()


def child(work: Path, phase: str) -> None:
    os.chdir(work)
    if phase == "prep":
        phase_prep(work)
    elif phase.startswith("train:"):
        phase_train(work, phase.split(":", 1)[1])
    else:
        phase_eval(work, with_recipes=phase == "eval")


def add_time(work: Path, phase: str, seconds: float, finished: bool) -> None:
    f = work / "times.json"
    times = json.loads(f.read_text()) if f.exists() else {}
    row = times.setdefault(phase, {"seconds": 0.0, "calls": 0, "finished": False})
    row["seconds"] = round(row["seconds"] + seconds, 1)
    row["calls"] += 1
    row["finished"] = finished
    f.write_text(json.dumps(times, indent=1))


def cmd_run(args) -> int:
    work = Path(args.work).resolve()
    (work / "runs").mkdir(parents=True, exist_ok=True)
    if not (work / "tasks").exists():
        (work / "tasks").symlink_to(HERE / "tasks")
    os.environ["SMALL_SCALE_OVERRIDES"] = json.dumps(args.p)
    t_end = time.monotonic() + args.deadline_s
    for phase in PHASES:
        if args.only and phase not in args.only.split(","):
            continue
        if done(work, phase):
            print(f"== {phase}: done", flush=True)
            continue
        left = t_end - time.monotonic()
        if left < 20:
            print(f"== {phase}: no time left ({left:.0f} s)", flush=True)
            return 3
        print(f"== {phase}: start ({left:.0f} s left)", flush=True)
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, __file__, "child", "--work", str(work), "--phase", phase],
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = None
        add_time(work, phase, time.monotonic() - t0, done(work, phase))
        if rc is None:
            print(f"== {phase}: stopped at the deadline", flush=True)
            return 3
        if rc != 0:
            print(f"== {phase}: failed (exit {rc})", flush=True)
            return rc
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--work", required=True)
    r.add_argument("--deadline-s", type=float, default=540.0)
    r.add_argument("-p", action="append", default=[], help="SECTION.KEY=VALUE for every phase")
    r.add_argument("--only", default="", help="comma-separated phases (prep, train:RECIPE, eval)")
    c = sub.add_parser("child")
    c.add_argument("--work", required=True)
    c.add_argument("--phase", required=True)
    s = sub.add_parser("summarize")
    s.add_argument("--work", required=True)
    s.add_argument("--docs", required=True)
    args = ap.parse_args()
    if args.cmd == "run":
        return cmd_run(args)
    if args.cmd == "child":
        child(Path(args.work).resolve(), args.phase)
        return 0
    from scripts.small_scale_report import summarize

    summarize(Path(args.work).resolve(), Path(args.docs))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
