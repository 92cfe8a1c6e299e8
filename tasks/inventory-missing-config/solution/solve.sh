#!/bin/bash
# The tool exits until settings.ini exists with real values; create it from the template.
set -euo pipefail
cd /app/inventory
sed -e 's|^data_dir = CHANGE_ME|data_dir = /app/stock|' \
    -e 's|^output = CHANGE_ME|output = /app/reports/inventory.txt|' \
    -e 's|^low_stock_threshold = CHANGE_ME|low_stock_threshold = 5|' settings.ini.template > settings.ini
python3 /app/inventory/report.py
