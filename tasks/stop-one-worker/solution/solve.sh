#!/bin/bash
# Select the process by its exact --name argument, not by a substring of the command line.
set -euo pipefail
bash /app/start_workers.sh
pid=$(pgrep -f -x 'python3 /app/workers/worker.py --name worker-a')
echo "stopping worker-a (pid $pid)"
kill "$pid"
sleep 1
ps -eo pid,stat,args | grep -v grep | grep workers/ || true
