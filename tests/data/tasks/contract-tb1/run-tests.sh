#!/bin/bash
# Terminal-Bench 1 style: no reward file, the exit code decides.
test -f "$TEST_DIR/check.txt" && test -f /app/done.txt
