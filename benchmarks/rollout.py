"""Where the time of a rollout goes: model, sandbox, verifier, and the harness's own code.

    python benchmarks/rollout.py --episodes 8 --workers 4 --sandbox auto            # scripted model
    python benchmarks/rollout.py --episodes 2 --workers 2 --smollm2 --max-steps 3  # + embedded SmolLM2

Plays N parallel episodes of a tiny real task through `run_rollouts` (the same path as
`mirl rollout`) and prints steps per second and the share of episode time per component. The
harness's own share of a step must stay under 5% with the scripted model (exit 1 otherwise):
with a model that answers instantly, anything we add shows up undiluted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from mirl.agent import AgentConfig
from mirl.agent.rollout import RolloutConfig, run_rollouts
from mirl.sandbox.base import SandboxConfig
from mirl.tasks import load_task

OWN_SHARE_LIMIT = 0.05


def write_task(root: Path) -> Path:
    d = root / "bench-hello"
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "instruction.md").write_text("Create the file /app/hello.txt containing the single line `hi`.\n")
    (d / "task.toml").write_text('version = "1.0"\n[agent]\ntimeout_sec = 600.0\n[verifier]\ntimeout_sec = 60.0\n')
    (d / "environment" / "Dockerfile").write_text("FROM mirl-base\nWORKDIR /app\nRUN mkdir -p /app\n")
    (d / "tests" / "test.sh").write_text(
        '#!/bin/bash\n[ "$(cat /app/hello.txt 2>/dev/null)" = hi ] && r=1 || r=0\necho $r > /logs/verifier/reward.txt\n')
    return d


def scripted_policy(steps: int):
    """Explores for `steps - 2` steps, writes the file, submits: a fixed, realistic command mix."""
    from mirl.llm.scripted import ScriptedModel

    def reply(messages):
        k = (len(messages) - 2) // 2  # steps taken so far
        if k < steps - 2:
            cmd = ["ls -la /app", "cat /etc/os-release | head -3", "python3 -c 'print(2+2)'", "find /app | head"][k % 4]
        elif k == steps - 2:
            cmd = "echo hi > /app/hello.txt"
        else:
            cmd = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
        return f"THOUGHT: step {k}.\n\n```bash\n{cmd}\n```"

    return ScriptedModel(reply, name="bench")


def measure(label: str, task, model, sandbox: SandboxConfig, episodes: int, workers: int, agent: AgentConfig,
            out: Path) -> dict:
    cfg = RolloutConfig(out=str(out), seeds=episodes, workers=workers, progress=False, agent=agent, sandbox=sandbox)
    t0 = time.perf_counter()
    res = run_rollouts(cfg, tasks=[task], model=model)
    wall = time.perf_counter() - t0
    trajs = res.new
    errors = [t.error for t in trajs if t.error]
    if errors:
        print(f"{label}: {len(errors)} episode(s) failed, first: {errors[0]}", file=sys.stderr)
    tot = {k: sum(t.timings.get(k, 0.0) for t in trajs) for k in ("model_s", "sandbox_s", "verify_s", "own_s", "total_s")}
    tot["own_s"] += res.write_s  # appending the records is ours too
    tot["total_s"] += res.write_s
    steps = sum(len(t.steps) for t in trajs)
    share = {k: tot[k] / tot["total_s"] if tot["total_s"] else 0.0 for k in tot}
    # a step's own time against the step's whole time (model call + command + our code)
    step_time = tot["model_s"] + tot["sandbox_s"] + tot["own_s"]
    return {"label": label, "episodes": len(trajs), "steps": steps, "wall_s": wall,
            "steps_per_s": steps / wall if wall else 0.0, "model": share["model_s"], "sandbox": share["sandbox_s"],
            "verify": share["verify_s"], "own": share["own_s"],
            "own_ms_per_step": 1000 * tot["own_s"] / max(1, steps),
            "own_of_step": tot["own_s"] / step_time if step_time else 0.0,
            "rewards": sum(t.reward or 0 for t in trajs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6, help="steps per scripted episode")
    ap.add_argument("--sandbox", default="auto", help="auto | docker | bwrap | local")
    ap.add_argument("--smollm2", action="store_true", help="also measure the embedded SmolLM2 policy (slow)")
    ap.add_argument("--max-steps", type=int, default=3, help="step limit for the SmolLM2 episodes")
    args = ap.parse_args(argv)

    from mirl.sandbox.base import SandboxError

    root = Path(tempfile.mkdtemp(prefix="mirl-bench-"))
    task = load_task(write_task(root))
    sandbox = SandboxConfig(backend=args.sandbox)
    rows = []
    try:
        rows.append(measure("scripted", task, scripted_policy(args.steps), sandbox, args.episodes, args.workers,
                            AgentConfig(max_steps=args.steps + 2), root / "scripted"))
        if args.smollm2:
            from mirl.llm.client import LLMClient
            from mirl.llm.config import LLMConfig

            model = LLMClient(LLMConfig(cache=False), run_dir=root / "smollm2", stage="bench").model("policy")
            model.complete([{"role": "user", "content": "hi"}], max_tokens=1)  # load outside the measurement
            rows.append(measure("local/smollm2", task, model, sandbox, args.episodes, args.workers,
                                AgentConfig(max_steps=args.max_steps, max_output_tokens=48), root / "smollm2"))
    except SandboxError as e:
        print(f"benchmark needs a sandbox: {e}", file=sys.stderr)
        return 2

    print(f"\n{args.episodes} episodes, {args.workers} workers, sandbox {args.sandbox}\n")
    head = f"{'policy':14s} {'eps':>4s} {'steps':>6s} {'wall s':>7s} {'steps/s':>8s} {'model':>7s} " \
           f"{'sandbox':>8s} {'verify':>7s} {'own':>7s} {'own ms/step':>12s} {'own/step':>9s}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['label']:14s} {r['episodes']:4d} {r['steps']:6d} {r['wall_s']:7.2f} {r['steps_per_s']:8.2f} "
              f"{r['model']:7.1%} {r['sandbox']:8.1%} {r['verify']:7.1%} {r['own']:7.2%} "
              f"{r['own_ms_per_step']:12.3f} {r['own_of_step']:9.2%}")
    ok = rows[0]["own_of_step"] < OWN_SHARE_LIMIT
    print(f"\nown code per scripted step: {rows[0]['own_of_step']:.2%} "
          f"({'under' if ok else 'OVER'} the {OWN_SHARE_LIMIT:.0%} limit)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
