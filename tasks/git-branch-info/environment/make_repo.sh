#!/bin/bash
# Builds /app/repo with a fixed history (fixed authors and dates, so hashes are stable).
set -euo pipefail
export GIT_AUTHOR_NAME="Ana Silva" GIT_AUTHOR_EMAIL="ana@example.com"
export GIT_COMMITTER_NAME="Ana Silva" GIT_COMMITTER_EMAIL="ana@example.com"
n=0
commit() {  # commit MESSAGE
  n=$((n + 1))
  export GIT_AUTHOR_DATE="2024-06-$(printf %02d "$n")T08:00:00+00:00" GIT_COMMITTER_DATE="2024-06-$(printf %02d "$n")T08:00:00+00:00"
  git add -A && git commit -q -m "$1"
}
mkdir -p /app/repo && cd /app/repo
git init -q -b main
for i in 1 2 3 4 5; do echo "step $i" >> CHANGES.txt; commit "main change $i"; done
git checkout -q -b release-2.4
for i in 1 2 3; do echo "release fix $i" >> RELEASE.txt; commit "release fix $i"; done
git checkout -q main
for i in 6 7 8 9; do echo "step $i" >> CHANGES.txt; commit "main change $i"; done
git checkout -q release-2.4
