#!/bin/bash
# Starts the queue workers and their monitor in the background (once).
set -euo pipefail
state=/var/lib/workers/started
mkdir -p /app/logs /var/lib/workers
if [ -s "$state" ]; then
  echo "workers were already started (see $state); not starting them twice" >&2
  exit 1
fi
for name in worker-a worker-ab worker-a-canary worker-b; do
  nohup python3 /app/workers/worker.py --name "$name" >> "/app/logs/$name.log" 2>&1 &
  echo "$name $!" >> "$state"
done
nohup python3 /app/workers/monitor.py --watch worker-a,worker-ab,worker-a-canary,worker-b >> /app/logs/monitor.log 2>&1 &
echo "monitor $!" >> "$state"
sleep 0.5
echo "started: $(cut -d' ' -f1 "$state" | tr '\n' ' ')"
