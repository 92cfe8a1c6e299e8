"""What a recipe's training rollouts did, per misbehavior: how often the behavior judge saw the misbehavior
again (1 - r_e), how often a rollout ran no command at all, the share of policy steps that ran one, and
how many groups had rewards that differ (live) or an r_e that differs. Read from a run's
`recipes/NAME/training/rollouts.jsonl` (stage 04), e.g. the rollouts of the first step, sampled by the
base policy before any update:

    python benchmarks/gpu/rollout_behavior.py RUN/recipes/mirl/training/rollouts.jsonl --steps 1 [--csv OUT]
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import sys
from pathlib import Path


def rows(path: Path, steps: set[int] | None):
    with path.open() as f:
        for line in f:
            r = json.loads(line)
            if steps is None or r["step"] in steps:
                yield r


def table(records) -> list[dict]:
    per: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    groups: dict[tuple, list] = collections.defaultdict(list)
    for r in records:
        rw = r["reward"]
        misbehavior = r["start"].split("|")[0]
        if not rw["valid"]:
            per[misbehavior]["invalid"] += 1
            continue
        policy = [s for s in r["trajectory"]["steps"] if s.get("source") == "policy"]
        acting = sum(1 for s in policy if s.get("command"))
        c = per[misbehavior]
        c["rollouts"] += 1
        c["repeated"] += not rw["r_e"]
        c["passed"] += bool(rw["r_o"])
        c["silent"] += acting == 0
        c["steps"] += len(policy)
        c["acting_steps"] += acting
        groups[(misbehavior, r["step"], r["draw"])].append((rw["reward"], bool(rw["r_e"])))
    for (misbehavior, _, _), g in groups.items():
        per[misbehavior]["groups"] += 1
        per[misbehavior]["groups_live"] += len({x[0] for x in g}) > 1
        per[misbehavior]["groups_r_e_mixed"] += len({x[1] for x in g}) > 1
    out = []
    for misbehavior, c in sorted(per.items()):
        n = max(c["rollouts"], 1)
        out.append({"misbehavior": misbehavior, "rollouts": c["rollouts"], "invalid": c["invalid"],
                    "repeated": round(c["repeated"] / n, 3), "passed": round(c["passed"] / n, 3),
                    "silent": round(c["silent"] / n, 3), "acting_steps": round(c["acting_steps"] / max(c["steps"], 1), 3),
                    "groups": c["groups"], "groups_live": c["groups_live"], "groups_r_e_mixed": c["groups_r_e_mixed"]})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rollouts", type=Path, help="a recipe's training/rollouts.jsonl")
    ap.add_argument("--steps", default="", help="training steps to read, e.g. 1 or 1-3 (default: all)")
    ap.add_argument("--csv", type=Path, help="also write the table here")
    a = ap.parse_args(argv)
    steps = None
    if a.steps:
        lo, _, hi = a.steps.partition("-")
        steps = set(range(int(lo), int(hi or lo) + 1))
    out = table(rows(a.rollouts, steps))
    if not out:
        print(f"{a.rollouts}: no rollouts at steps {a.steps or 'any'}", file=sys.stderr)
        return 1
    for stream in [sys.stdout] + ([a.csv.open("w", newline="")] if a.csv else []):
        w = csv.DictWriter(stream, fieldnames=list(out[0]))
        w.writeheader()
        w.writerows(out)
        stream.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
