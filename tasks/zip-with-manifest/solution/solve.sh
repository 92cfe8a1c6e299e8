#!/bin/bash
set -e
mkdir -p /app/dist
cd /app/release
rm -f /app/dist/release.zip
zip /app/dist/release.zip README.md bin/tool.sh lib/util.py
sha256sum README.md bin/tool.sh lib/util.py > /app/dist/SHA256SUMS
sha256sum -c /app/dist/SHA256SUMS
unzip -l /app/dist/release.zip
