#!/usr/bin/env bash
# The main job, from nothing:   bash scripts/demo.sh [RUN_NAME [mirl batch options...]]
# Set-up, then every stage notebook headless (`mirl batch`, papermill) on the embedded default
# (params/demo.yaml): data in runs/<RUN_NAME>/, executed notebooks, figures, tables, logs and
# index.html in reports/<RUN_NAME>/. Run it again after a kill or a failure: finished stages are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --system
VENV=${MIRL_VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"
name=${1:-demo}
[ $# -gt 0 ] && shift
exec mirl batch --params params/demo.yaml --name "$name" "$@"
