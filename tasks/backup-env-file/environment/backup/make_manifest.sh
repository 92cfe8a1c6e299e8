#!/bin/bash
# Writes a manifest (sha256 and path of every file) of a directory tree, for the backup job.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/backup.env"

: "${BACKUP_SRC:?BACKUP_SRC is not set in backup.env}"
: "${BACKUP_DEST:?BACKUP_DEST is not set in backup.env}"
: "${BACKUP_LABEL:?BACKUP_LABEL is not set in backup.env}"

[ -d "$BACKUP_SRC" ] || { echo "make_manifest: source directory $BACKUP_SRC does not exist" >&2; exit 1; }
[ -d "$BACKUP_DEST" ] || { echo "make_manifest: destination directory $BACKUP_DEST does not exist" >&2; exit 1; }

out="$BACKUP_DEST/$BACKUP_LABEL.manifest"
cd "$BACKUP_SRC"
files=$(find . -type f | sed 's|^\./||' | LC_ALL=C sort)
{
  echo "label: $BACKUP_LABEL"
  echo "source: $BACKUP_SRC"
  echo "files: $(printf '%s\n' "$files" | grep -c .)"
  printf '%s\n' "$files" | while IFS= read -r f; do sha256sum -- "$f"; done
} > "$out"
echo "wrote $out"
