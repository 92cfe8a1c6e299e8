#!/bin/bash
set -euo pipefail
cd /app/service
nohup python3 /app/service/catalog.py --port 8080 --items /app/service/items.json > /app/service/catalog.log 2>&1 &
for _ in $(seq 50); do curl -sf http://127.0.0.1:8080/health && break; sleep 0.2; done
