#!/bin/bash
# Boots the local services in the background and records their PIDs in /app/run/<name>.pid.
set -uo pipefail
run=/app/run
mkdir -p "$run" /app/logs
if [ -s "$run/cache.pid" ] && grep -qs -- "--name cache" "/proc/$(cat "$run/cache.pid")/cmdline"; then
  echo "services are already running" >&2
  exit 1
fi
for name in cache web queue; do
  nohup python3 /app/services/service.py --name "$name" >> "/app/logs/$name.log" 2>&1 &
  echo $! > "$run/$name.pid"
done
sleep 1
for name in cache web queue; do
  if kill -0 "$(cat "$run/$name.pid")" 2>/dev/null; then echo "$name: running"; else echo "$name: failed (see /app/logs/$name.log)"; fi
done
exit 0
