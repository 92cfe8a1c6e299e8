#!/bin/bash
set -euo pipefail
cd /app/data
du -sk * | sort -rn > /app/usage.txt
cat /app/usage.txt
