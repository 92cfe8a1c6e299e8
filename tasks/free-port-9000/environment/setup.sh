#!/bin/bash
# Starts the processes that run on the production host (once).
set -euo pipefail
state=/var/lib/hostsetup/pids
mkdir -p /var/lib/hostsetup /var/log/host
if [ -s "$state" ]; then echo "already set up (see $state)" >&2; exit 1; fi
nohup python3 /opt/helpers/metrics_exporter.py --port 9001 >> /var/log/host/metrics.log 2>&1 &
echo "metrics_exporter $!" >> "$state"
nohup python3 /opt/legacy/orders_v1.py >> /var/log/host/orders_v1.log 2>&1 &
echo "orders_v1 $!" >> "$state"
nohup python3 /opt/helpers/cache_warmer.py >> /var/log/host/cache_warmer.log 2>&1 &
echo "cache_warmer $!" >> "$state"
for _ in $(seq 50); do
  curl -s -o /dev/null http://127.0.0.1:9000/ && curl -s -o /dev/null http://127.0.0.1:9001/ && break
  sleep 0.1
done
echo "host processes started"
