#!/bin/bash
set -uo pipefail
cd /app/files
sha256sum -c /app/SHA256SUMS 2>/dev/null | grep -v ': OK$' | sed 's/: FAILED.*$//' | sort > /app/corrupted.txt
cat /app/corrupted.txt
