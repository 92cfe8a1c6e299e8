#!/usr/bin/env bash
# The main job, from nothing:   bash scripts/demo.sh [RUN_NAME]
# Runs every stage notebook headless (papermill) on the embedded default (params/demo.yaml):
# data in runs/<RUN_NAME>/, executed notebooks and figures in reports/<RUN_NAME>/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --system
VENV=${MIRL_VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"
exec mirl run notebooks/[0-9]*.ipynb --params params/demo.yaml --name "${1:-demo}"
