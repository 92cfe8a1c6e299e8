#!/bin/bash
# Judge each PID file by what /proc says about its PID now, never by a PID seen earlier.
set -uo pipefail
bash /app/start_services.sh
cd /app/run
: > /tmp/removed
for f in *.pid; do
  name=${f%.pid}
  pid=$(tr -d '[:space:]' < "$f")
  if [[ "$pid" =~ ^[0-9]+$ ]] && [ -r "/proc/$pid/cmdline" ] \
     && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] \
     && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "--name $name\( \|$\)"; then
    echo "valid: $f ($pid)"
  else
    echo "stale: $f"; rm -f -- "$f"; echo "$f" >> /tmp/removed
  fi
done
sort /tmp/removed > /app/removed.txt
cat /app/removed.txt
