#!/bin/bash
# Oldest commit whose diff adds the exact line (a regex pickaxe on added lines).
set -euo pipefail
cd /app/repo
git log --reverse --format=%H -G'^MAX_RETRIES = 7$' | while read -r h; do
  if git show "$h" --format= | grep -qx '+MAX_RETRIES = 7'; then echo "$h"; break; fi
done > /app/commit.txt
cat /app/commit.txt
