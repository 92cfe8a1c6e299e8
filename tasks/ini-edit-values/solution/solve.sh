#!/bin/bash
set -euo pipefail
cd /app/config
sed -i 's/^port = 8000$/port = 8080/; s/^level = INFO$/level = DEBUG/' app.ini
sed -i 's/^pool_size = 5$/pool_size = 5\ntimeout = 30/' app.ini
cat app.ini
