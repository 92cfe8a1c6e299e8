#!/usr/bin/env bash
# The small-scale experiment in phases, one device call after another (benchmarks/gpu/NOTES.md):
#   bash benchmarks/gpu/small_scale_phases.sh [CALL_S]     (CALL_S: the seconds this call may take, stop and packing included)
# from the repository root. The first call unpacks the seeded run (stages 01-03 and the base policy's
# continuations, docs/small_scale/data/runs.tar.xz) into $SMALL_WORK (default ~/small-work) with every
# recipe's training and the seeded pass@1 dropped; then the recipes are trained one after another,
# evaluated together (one misbehavior-rate stage for all of them: 2:00 + 2:21 when each was evaluated after
# its training, on 2026-12-06), and the costs come last. pass@1 from step 0 (stage 06) is not a phase: it
# took 0:52-0:56 of the device and was 0 for every policy in all three runs of 2026-12-06 (SmolLM2-135M
# solves no bundled task on its own), and without it the experiment fits 20 device minutes; run it with
# `bash benchmarks/gpu/small_scale.sh 120 --from pass_at_k --to pass_at_k`. A finished phase is
# marked in the work directory and skipped by the next call; a phase starts only when the call has the
# seconds it usually takes (a training cut at the deadline loses the steps since its last checkpoint), so
# a call ends early rather than start one it cannot finish. Every call runs the same command until it
# prints `small_scale_phases: all done`. Exit code: 0 all done, 1 a phase failed, 2 more calls needed.
#
# Another experiment on the same stages 01-03: SMALL_NAME names its run (seeded with stages 01-03 of the
# bundled run only, the base policy evaluated afresh beside its recipes), SMALL_PARAMS its params file
# (relative to the repository) and SMALL_PHASES its phases, e.g. the taxonomy-wide judge alone:
#   SMALL_NAME=taxonomy SMALL_PARAMS=params/small_scale/experiment-taxonomy.yaml \
#   SMALL_PHASES=$'training:mirl-taxonomy training:mirl-taxonomy 380\nmisbehavior_rate misbehavior_rate 200' \
#   bash benchmarks/gpu/small_scale_phases.sh 585
# SMALL_PARALLEL=N trains up to N recipes at once (`mirl batch --parallel N`), each in a process of its own
# on the one GPU; then one phase trains them all: `training training SECONDS`. Every recipe at 24 steps:
#   SMALL_NAME=steps24-all SMALL_PARAMS=params/small_scale/steps24/experiment.yaml SMALL_PARALLEL=4 \
#   SMALL_PHASES=$'training training 300\nmisbehavior_rate misbehavior_rate 240\ncost cost 30' \
#   bash benchmarks/gpu/small_scale_phases.sh 588
set -u
cd "$(dirname "$0")/../.." || exit 1
CALL=${1:-560}
export PYTHONUNBUFFERED=1
W=${SMALL_WORK:-$HOME/small-work}
export SMALL_NAME=${SMALL_NAME:-small}
S=$W/runs/$SMALL_NAME
# The run is seeded in a folder of its own and moved into place last: a call cut off while seeding leaves
# no half-made run for the next call to train on.
if [ ! -d "$S" ]; then
  T=$(mktemp -d -p "${TMPDIR:-/tmp}") || exit 1
  trap 'rm -rf "$T"' EXIT
  tar xJf docs/small_scale/data/runs.tar.xz -C "$T" || exit 1
  if [ "$SMALL_NAME" != small ]; then  # stages 01-03 only; the base policy is evaluated afresh
    mkdir -p "$T/new" && for d in profiling taxonomy prefixes; do cp -a "$T/runs/small/$d" "$T/new/" || exit 1; done
    cp "$T/runs/small/llm_calls.jsonl" "$T/new/" || exit 1
    KEEP=inputs
  else
    mv "$T/runs/small" "$T/new" && rm -rf "$T"/new/recipes/*/training "$T"/new/recipes/*/.training.stage.lock \
      "$T"/new/recipes/*/llm_calls.jsonl "$T"/new/recipes/*/device_time.jsonl "$T/new/pass_at_k" \
      "$T/new/.pass_at_k.stage.lock" || exit 1
    KEEP=base
  fi
  # the run's ledger keeps every earlier evaluation's calls: keep only those of what this run reuses (stages
  # 01-03, and in the bundled run's name the base policy's continuations), so the costs count each call once
  python3 - "$T/new/llm_calls.jsonl" "$KEEP" <<'PY' || exit 1
import json, sys
path, keep = sys.argv[1], sys.argv[2]
lines = open(path).read().splitlines(keepends=True)
def kept(line):
    row = json.loads(line)
    return row.get("stage") in ("profiling", "taxonomy", "prefixes") or (
        keep == "base" and row.get("stage") == "misbehavior_rate" and "/checkpoints/" not in str(row.get("model")))
open(path, "w").writelines(line for line in lines if line.strip() and kept(line))
PY
  mkdir -p "$W/runs" && mv "$T/new" "$S" || exit 1
  rm -rf "$T"; trap - EXIT
fi
# a run whose seeded stages are gone cannot go on (on 2026-12-06 a call's end found them deleted, most likely by
# a sampled command, before the local sandbox kept its sessions off /root): say so rather than fail in a stage
for d in profiling taxonomy prefixes; do
  [ -d "$S/$d" ] || { echo "small_scale_phases: $S/$d is gone; start the run afresh: rm -rf $S $W/$SMALL_NAME.phase*"; exit 1; }
done
# the batch's deadline leaves room for what follows it inside CALL: its stop (SIGINT, then SIGKILL 20 s later),
# the ending of what it left (up to 15 s) and the packing; a call of 575 s without it ended at 594 s (2026-12-06)
STOP_S=45
END=$((SECONDS + CALL - STOP_S))
LOG=${OUT:-$W}/log.txt
# the run goes back packed once, whatever way this call ends (small_scale.sh would pack after every phase)
export SMALL_PACK=0
pack() {
  [ -n "${OUT:-}" ] && [ -d "$S" ] || return 0
  local n=$SMALL_NAME
  (cd "$W" && tar cf - --exclude=checkpoints "runs/$n" $([ -d "reports/$n" ] && echo "reports/$n") | xz -T8 -3 \
     > "$OUT/$n.tar.xz" && cd "$OUT" && split -b 15M -d "$n.tar.xz" "$n.tar.xz." && rm "$n.tar.xz")
}
trap pack EXIT
# phase: `--from` stage, `--to` stage, the seconds it took on an H100 (2026-12-06) with a margin
PHASES=${SMALL_PHASES:-"training:mirl training:mirl 380
training:outcome-prefix training:outcome-prefix 380
training:tmax training:tmax 380
misbehavior_rate misbehavior_rate 200
cost cost 30"}
i=0
while read -r from to need; do
  i=$((i + 1))
  [ -f "$W/$SMALL_NAME.phase$i" ] && continue
  left=$((END - SECONDS))
  if [ "$left" -lt "$need" ]; then
    echo "small_scale_phases: phase $i ($from..$to) needs ~${need}s, ${left}s left in this call: run me again"
    exit 2
  fi
  bash benchmarks/gpu/small_scale.sh "$left" --from "$from" --to "$to" ${SMALL_PARALLEL:+--parallel "$SMALL_PARALLEL"} 2>&1 | grep -v UNCONFINED | tee -a "$LOG" \
    | grep -v "^-r\|^total\|^drwx" | tail -14
  rc=${PIPESTATUS[0]}
  echo "== phase $i $from..$to: exit code $rc, $((END - SECONDS))s left"
  case $rc in
    0) touch "$W/$SMALL_NAME.phase$i" ;;
    3|124|137) exit 2 ;;  # still carrying, or stopped at the deadline: the next call continues
    *) exit 1 ;;
  esac
done <<< "$PHASES"
echo "small_scale_phases: all done"
