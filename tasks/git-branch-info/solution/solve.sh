#!/bin/bash
set -euo pipefail
cd /app/repo
{ git branch --show-current; git rev-list --count HEAD; } > /app/branch_info.txt
cat /app/branch_info.txt
