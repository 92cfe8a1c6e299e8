#!/bin/bash
# The script sources backup.env (missing) and needs the destination directory to exist.
set -euo pipefail
cat > /app/backup/backup.env <<'ENV'
BACKUP_SRC=/app/projects
BACKUP_DEST=/app/manifests
BACKUP_LABEL=nightly
ENV
mkdir -p /app/manifests
bash /app/backup/make_manifest.sh
