#!/bin/bash
set -euo pipefail
cd /app
sed -i 's|^0 2 \* \* \* /usr/local/bin/backup.sh --full$|30 1 * * * /usr/local/bin/backup.sh --full|' crontab
sed -i 's|^30 4 \* \* 0 /usr/local/bin/cleanup-tmp.sh$|# &|' crontab
echo '0 */6 * * * /usr/local/bin/rotate-logs.sh' >> crontab
cat crontab
