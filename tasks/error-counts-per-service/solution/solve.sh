#!/bin/bash
cat /app/logs/app.log.1 /app/logs/app.log | awk '
  { svc = $4; gsub(/[][]/, "", svc); seen[svc] = 1; if ($3 == "ERROR") n[svc]++ }
  END { for (s in seen) printf "%s\t%d\n", s, n[s] + 0 }' \
  | jq -R -n '[inputs | split("\t") | {(.[0]): (.[1] | tonumber)}] | add' > /app/error_counts.json
cat /app/error_counts.json
