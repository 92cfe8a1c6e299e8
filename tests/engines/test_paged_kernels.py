"""The paged engine's Triton kernels (decode with and without split positions, packed prefill) compute
the reference attention, and the engine decodes the same with them as with the reference. On a CPU
through Triton's interpreter (in a subprocess: `tests/engines/kernel_checks.py`); on a GPU the same
checks run compiled in `benchmarks/gpu/engine_bench.py`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.real import missing

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_the_kernels_compute_the_reference_attention():
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        missing("triton", "it is in the test extra: pip install -e '.[test]'")
    proc = subprocess.run([sys.executable, "-m", "tests.engines.kernel_checks"], cwd=REPO, capture_output=True,
                          text=True, timeout=590)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("decode_split1", "decode_split3", "prefill"):
        assert got[key] < 1e-5, got
    assert got["engine_same_ids"] and got["engine_logprobs"] < 1e-5, got
    assert got["precision"] == {"float32-cuda": "tf32x3", "float32-cpu": "ieee", "bfloat16-cuda": "", "bfloat16-cpu": ""}
