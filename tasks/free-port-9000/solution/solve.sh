#!/bin/bash
# Identify the holder of the port by the socket, then stop exactly that PID.
set -euo pipefail
bash /app/setup.sh
pid=$(ss -ltnpH 'sport = :9000' | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
echo "port 9000 held by pid $pid: $(tr '\0' ' ' < /proc/$pid/cmdline)"
kill "$pid"
for _ in $(seq 50); do ss -ltnH 'sport = :9000' | grep -q . || break; sleep 0.1; done
cd /app/service
nohup python3 /app/service/orders.py --port 9000 > /app/service/orders.log 2>&1 &
for _ in $(seq 50); do curl -sf http://127.0.0.1:9000/whoami && break; sleep 0.1; done
