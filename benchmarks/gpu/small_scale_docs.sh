#!/usr/bin/env bash
# Copies a small-scale experiment's tables and figures from its reports into its docs folder and packs its
# run there as data/runs.tar.xz, without checkpoints and without the training's token-level rollouts
# (rollouts.jsonl: 93% of a 24-step run's archive; every tracked byte travels with each device call, whose
# 64 MiB must also carry the wheels, benchmarks/gpu/carry.py):
#   bash benchmarks/gpu/small_scale_docs.sh [WORK]     # WORK holds runs/NAME and reports/NAME (default .)
# e.g. after unpacking what benchmarks/gpu/small_scale.sh sent back: cat small.tar.xz.* | tar xJf - -C WORK.
# NAME is $SMALL_NAME (default small, the bundled experiment, whose folder is docs/small_scale/); another
# experiment's run goes to docs/small_scale/NAME/ (SMALL_DOCS names another folder). The folder's files are
# replaced; its README.md (the conclusion, written from these files) is not touched.
set -eu
cd "$(dirname "$0")/../.."
W=${1:-.}
NAME=${SMALL_NAME:-small}
R=$W/reports/$NAME
if [ "$NAME" = small ]; then D=${SMALL_DOCS:-docs/small_scale}; else D=${SMALL_DOCS:-docs/small_scale/$NAME}; fi
[ -d "$R" ] && [ -d "$W/runs/$NAME" ] || { echo "no reports/$NAME and runs/$NAME under $W" >&2; exit 2; }
mkdir -p "$D/data"
find "$D" -maxdepth 1 -type f ! -name README.md -delete
for f in misbehavior_rates.csv misbehavior_rates.png misbehavior_reductions_ci.csv misbehavior_reduction_ci.png misbehavior_reduction_differences.csv \
         success_from_prefixes.csv success_from_prefixes.png silence.csv acting.csv actions.csv detectors.csv training_curves_recipes.png cost_totals.csv \
         cost_side_by_side.png scores.csv taxonomy_types.csv prefix_funnel.csv profiling_per_env.csv; do
  if [ -f "$R/$f" ]; then cp "$R/$f" "$D/$f"; else echo "missing: $R/$f (that stage has not finished)"; fi
done
for m in "$R"/recipes/*/training_metrics.csv; do
  [ -f "$m" ] && cp "$m" "$D/training_$(basename "$(dirname "$m")").csv"
done
for m in "$R"/recipes/*/training_starts.csv; do
  [ -f "$m" ] && cp "$m" "$D/training_starts_$(basename "$(dirname "$m")").csv"
done
# a checkpoint policy is named by its absolute path on the machine that ran it: keep it from the run on
for f in "$D"/*.csv; do if [ -f "$f" ]; then sed -i -E 's#local//[^,"]*/(runs/[^,"]*)#local/\1#g' "$f"; fi; done
# the run names the repository copy it ran from by its path on that machine (batch.json, tracebacks), and
# its checkpoints by their absolute paths (`local//WORK/runs/...`): packed relative to the repository and to
# the batch's directory instead
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p "$T/runs" && cp -a "$W/runs/$NAME" "$T/runs/" && rm -rf "$T/runs/$NAME"/recipes/*/training/checkpoints
python3 - "$T/runs/$NAME" "$NAME" <<'PY'
import json, pathlib, re, sys
run, name = pathlib.Path(sys.argv[1]), sys.argv[2]
try:
    nbs = json.loads((run / "batch.json").read_text()).get("notebooks") or []
    root = str(pathlib.Path(nbs[0]["notebook"]).parent.parent) + "/"
except (OSError, ValueError, LookupError, TypeError):
    root = ""
checkpoint = re.compile(r"local//[^\s\"',]*?/(runs/" + re.escape(name) + r"/)")
for f in run.rglob("*"):
    if f.is_file() and f.suffix in (".json", ".jsonl", ".csv", ".txt", ".log"):
        text = f.read_text(errors="surrogateescape")
        new = checkpoint.sub(r"local/\1", text)
        if root.startswith("/") and root != "//":
            new = new.replace(root, "")
        if new != text:
            f.write_text(new, errors="surrogateescape")
PY
tar cf - -C "$T" --exclude=checkpoints --exclude=rollouts.jsonl "runs/$NAME" | xz -T0 -6 > "$D/data/runs.tar.xz"
ls -la "$D" "$D/data"
