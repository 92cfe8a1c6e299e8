#!/usr/bin/env bash
# The whole test suite, from nothing:   bash scripts/test.sh [pytest args]
# Installs what it needs (apt packages when root, Python packages into .venv), builds the local base
# image once (cached under ~/.cache/mirl), then runs pytest. Real-model and container tests are included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --system
VENV=${MIRL_VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"
set +e
export MIRL_REQUIRE_REAL=1  # a missing real component fails, it does not skip
python -m pytest "$@"
rc=$?
set -e
[ "$rc" = 5 ] && { echo "pytest collected no tests"; exit 1; }
exit "$rc"
