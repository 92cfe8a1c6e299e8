#!/bin/bash
cd /app/src
find . -name '*.py' -not -path './vendor/*' -not -path './mylib/records.py' -print0 \
  | xargs -0 grep -lZw 'fetch_data' \
  | xargs -0 -r sed -i -E 's/\bfetch_data\b/load_records/g'
python3 -W error::DeprecationWarning main.py
