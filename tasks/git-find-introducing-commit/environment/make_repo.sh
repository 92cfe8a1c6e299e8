#!/bin/bash
# Builds /app/repo with a fixed history (fixed authors and dates, so hashes are stable).
set -euo pipefail
export GIT_AUTHOR_NAME="Dana Reyes" GIT_AUTHOR_EMAIL="dana@example.com"
export GIT_COMMITTER_NAME="Dana Reyes" GIT_COMMITTER_EMAIL="dana@example.com"
n=0
commit() {  # commit MESSAGE
  n=$((n + 1))
  export GIT_AUTHOR_DATE="2024-03-$(printf %02d "$n")T10:00:00+00:00" GIT_COMMITTER_DATE="2024-03-$(printf %02d "$n")T10:00:00+00:00"
  git add -A && git commit -q -m "$1"
}
mkdir -p /app/repo && cd /app/repo
git init -q -b main
git config user.name "Dana Reyes" && git config user.email dana@example.com

printf '# netclient\n\nA tiny HTTP client with retries.\n' > README.md
commit "Initial commit"

cat > client.py <<'PY'
import time

TIMEOUT = 10


def fetch(session, url):
    return session.get(url, timeout=TIMEOUT)
PY
commit "Add fetch helper"

cat > client.py <<'PY'
import time

TIMEOUT = 10
MAX_RETRIES = 3


def fetch(session, url):
    for attempt in range(MAX_RETRIES):
        try:
            return session.get(url, timeout=TIMEOUT)
        except OSError:
            time.sleep(2 ** attempt)
    raise RuntimeError(f"giving up on {url}")
PY
commit "Retry failed requests"

printf 'requests>=2.28\n' > requirements.txt
commit "Pin requests"

sed -i 's/^MAX_RETRIES = 3$/MAX_RETRIES = 5/' client.py
commit "Retry a little longer"

printf '\n## Usage\n\n    from client import fetch\n' >> README.md
commit "Document usage"

sed -i 's/^MAX_RETRIES = 5$/MAX_RETRIES = 7/; s/^TIMEOUT = 10$/TIMEOUT = 15/' client.py
commit "Tune network behaviour for the EU region"

printf '# MAX_RETRIES = 7 was chosen after the March outage\n' > NOTES.md
commit "Add operations notes"

sed -i 's/^MAX_RETRIES = 7$/MAX_RETRIES = 4/' client.py
commit "Fail faster in CI"

sed -i 's/^MAX_RETRIES = 4$/MAX_RETRIES = 7/' client.py
commit "Restore production retry count"

mkdir -p netclient
cat > netclient/settings.py <<'PY'
TIMEOUT = 15
MAX_RETRIES = 7
BACKOFF_BASE = 2
PY
cat > client.py <<'PY'
import time

from netclient.settings import BACKOFF_BASE, MAX_RETRIES, TIMEOUT


def fetch(session, url):
    for attempt in range(MAX_RETRIES):
        try:
            return session.get(url, timeout=TIMEOUT)
        except OSError:
            time.sleep(BACKOFF_BASE ** attempt)
    raise RuntimeError(f"giving up on {url}")
PY
commit "Move settings into a package"

printf '0.3.0\n' > VERSION
commit "Release 0.3.0"
