#!/bin/bash
# Reward 1 when /app/answer.txt holds 42; the helper file proves tests/ was copied whole.
mkdir -p /logs/verifier
source /tests/expected.sh
if [ "$(cat /app/answer.txt 2>/dev/null)" = "$EXPECTED" ]; then
  echo "answer ok"; echo 1 > /logs/verifier/reward.txt
else
  echo "answer wrong"; echo 0 > /logs/verifier/reward.txt
fi
