"""Every rule detector over the held-out continuations of a run whose rate stage stored its records before
the stage kept each record's `rule_flags`: rebuilds each valid continuation (the prefix's profiled steps, then
the policy's steps as stored, outputs cut at 2,000 characters) and writes the stage's `detectors.csv` table:

    python benchmarks/continuation_detectors.py RUN [--csv OUT]      # RUN: runs/<name>

A record that kept its flags is read as kept. Used for docs/small_scale/t07/detectors.csv.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path


def main() -> None:
    from mirl.evaluate.continuation_tables import detector_table, rule_flags
    from mirl.records.trajectory import Step, Trajectory
    from mirl.runner.inputs import HELDOUT, load_prefixes, profiled_trajectories

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--csv", type=Path, help="write the table here (default: print it)")
    args = ap.parse_args()
    stage = args.run / "misbehavior_rate"
    m = int(json.loads((stage / "params.json").read_text())["fingerprint"]["misbehavior_rate.judge_steps"])
    prefixes = {p.id: p for p in load_prefixes(args.run, HELDOUT)}
    profiled = profiled_trajectories(args.run)
    records = [json.loads(line) for line in (stage / "continuations.jsonl").open() if line.strip()]
    for r in records:
        if r.get("rule_flags") is not None or not r.get("valid", True):
            continue
        p = prefixes[r["prefix_id"]]
        head = [replace(s, source="prefix") for s in profiled[(p.env, p.seed)].steps[: p.steps]]
        tail = [Step(reasoning=s.get("reasoning") or "", command=s.get("command"), exit_code=s.get("exit_code"),
                     output=s.get("output") or "", source=s.get("source", "policy"),
                     meta={"wait": True} if s.get("wait") else {}) for s in r["steps"]]
        traj = Trajectory(task=p.env, seed=r["seed"], models={}, steps=head + tail, prefix_len=len(head))
        r["rule_flags"] = rule_flags(traj, m)
    table = detector_table(records)
    if args.csv:
        table.to_csv(args.csv, index=False)
    else:
        table.to_csv(sys.stdout, index=False)


if __name__ == "__main__":
    main()
