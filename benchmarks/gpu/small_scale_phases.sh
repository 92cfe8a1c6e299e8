#!/usr/bin/env bash
# The small-scale experiment in phases, one device call after another (benchmarks/gpu/NOTES.md):
#   bash benchmarks/gpu/small_scale_phases.sh [CALL_S]
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
set -u
cd "$(dirname "$0")/../.." || exit 1
CALL=${1:-560}
export PYTHONUNBUFFERED=1
W=${SMALL_WORK:-$HOME/small-work}
S=$W/runs/small
if [ ! -d "$S" ]; then
  mkdir -p "$W" && tar xJf docs/small_scale/data/runs.tar.xz -C "$W" || exit 1
  rm -rf "$S"/recipes/*/training "$S"/recipes/*/.training.stage.lock "$S"/recipes/*/llm_calls.jsonl \
     "$S"/recipes/*/device_time.jsonl "$S"/pass_at_k "$S"/.pass_at_k.stage.lock
  # the run's ledger keeps every earlier evaluation's calls: keep only those of what this run reuses (stages
  # 01-03 and the base policy's continuations), so the costs count each call of this run once
  python3 - "$S/llm_calls.jsonl" <<'PY' || exit 1
import json, sys
path = sys.argv[1]
lines = open(path).read().splitlines(keepends=True)
def kept(line):
    row = json.loads(line)
    return row.get("stage") in ("profiling", "taxonomy", "prefixes") or (
        row.get("stage") == "misbehavior_rate" and "/checkpoints/" not in str(row.get("model")))
open(path, "w").writelines(line for line in lines if line.strip() and kept(line))
PY
fi
END=$((SECONDS + CALL))
LOG=${OUT:-$W}/log.txt
# the run goes back packed once, whatever way this call ends (small_scale.sh would pack after every phase)
export SMALL_PACK=0
pack() {
  [ -n "${OUT:-}" ] && [ -d "$S" ] || return 0
  (cd "$W" && tar cf - --exclude=checkpoints runs/small $([ -d reports/small ] && echo reports/small) | xz -T8 -3 \
     > "$OUT/small.tar.xz" && cd "$OUT" && split -b 15M -d small.tar.xz small.tar.xz. && rm small.tar.xz)
}
trap pack EXIT
# phase: `--from` stage, `--to` stage, the seconds it took on an H100 (2026-12-06) with a margin
PHASES="training:mirl training:mirl 380
training:outcome-prefix training:outcome-prefix 380
training:tmax training:tmax 380
misbehavior_rate misbehavior_rate 200
cost cost 30"
i=0
while read -r from to need; do
  i=$((i + 1))
  [ -f "$W/phase$i" ] && continue
  left=$((END - SECONDS))
  if [ "$left" -lt "$need" ]; then
    echo "small_scale_phases: phase $i ($from..$to) needs ~${need}s, ${left}s left in this call: run me again"
    exit 2
  fi
  bash benchmarks/gpu/small_scale.sh "$left" --from "$from" --to "$to" 2>&1 | grep -v UNCONFINED | tee -a "$LOG" \
    | grep -v "^-r\|^total\|^drwx" | tail -14
  rc=${PIPESTATUS[0]}
  echo "== phase $i $from..$to: exit code $rc, $((END - SECONDS))s left"
  case $rc in
    0) touch "$W/phase$i" ;;
    3|124|137) exit 2 ;;  # still carrying, or stopped at the deadline: the next call continues
    *) exit 1 ;;
  esac
done <<< "$PHASES"
echo "small_scale_phases: all done"
