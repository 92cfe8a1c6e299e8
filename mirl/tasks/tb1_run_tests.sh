#!/bin/bash
# The test runner for Terminal-Bench 1 tasks that ship no run-tests.sh: pytest on the task's
# tests/test_outputs.py, run from the task's WORKDIR, as Terminal-Bench's own default does. It uses
# the image's pytest when there is one and installs it with uv only when there is not.
if [ "$PWD" = "/" ]; then
    echo "error: no working directory set; the task's Dockerfile needs a WORKDIR" >&2
    exit 1
fi
if python3 -c "import pytest" 2>/dev/null; then
    python3 -m pytest "$TEST_DIR/test_outputs.py" -rA
elif command -v uv >/dev/null 2>&1; then
    uv run --with pytest pytest "$TEST_DIR/test_outputs.py" -rA
else
    echo "error: neither pytest nor uv is installed in the image" >&2
    exit 1
fi
