#!/bin/bash
cd /app/repo
grep -rnIoP '(?<![A-Za-z0-9_])(AKIA[A-Z0-9]{16}|ghp_[A-Za-z0-9]{36}|sk_live_[A-Za-z0-9]{24})(?![A-Za-z0-9_])' . \
  | cut -d: -f1,2 | sed 's|^\./||' | LC_ALL=C sort -t: -k1,1 -k2,2n -u > /app/leaks.txt
cat /app/leaks.txt
