#!/bin/bash
# Find the first commit after v1.0 at which the v1.0 tests fail (bisect), then revert it.
set -euo pipefail
cd /app/repo
bad=""
for h in $(git rev-list --reverse v1.0..main); do
  git checkout -q "$h"
  git show v1.0:test_pricing.py > /tmp/test_v1.py
  if ! (cd /tmp && PYTHONPATH=/app/repo python3 -m pytest -q -p no:cacheprovider /tmp/test_v1.py >/dev/null 2>&1); then
    bad="$h"; break
  fi
done
git checkout -q main
rm -f /tmp/test_v1.py
echo "bad commit: $(git log -1 --format='%h %s' "$bad")"
git revert --no-edit "$bad"
python3 -m pytest -q -p no:cacheprovider
git status --short
