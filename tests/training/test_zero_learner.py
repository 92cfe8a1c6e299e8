"""The DeepSpeed ZeRO-2 and ZeRO-3 learners on two CPU processes (torchrun, gloo) take the embedded
learner's step on the same batch: loss, grad norm, clipped gradients and the weights after it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mirl.training.learner import Example
from mirl.training.scale.zero_learner import shard
from tests.real import missing

ROOT = Path(__file__).resolve().parents[2]


def test_shards_balance_tokens_and_cover_the_batch_once():
    exs = [Example([1] * n, [1] * n, [0.0] * n) for n in (10, 3, 8, 7, 2)]
    shares = shard(exs, 2)
    assert sorted(i for s in shares for i in s) == list(range(5))
    # longest first to the lighter rank: 10 -> r0, 8 -> r1, 7 -> r1 (8 < 10), 3 -> r0, 2 -> r0 (13 < 15)
    assert shares == [[0, 1, 4], [2, 3]]
    assert shard(exs[:1], 3) == [[0], [], []]


def run_check(tmp_path, stage: int, *extra: str) -> dict:
    if importlib.util.find_spec("deepspeed") is None:
        missing("deepspeed (the scale extra)", "bash scripts/setup.sh, or pip install 'mirl[scale]'")
    out = tmp_path / f"zero{stage}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "benchmarks/gpu/zero_check.py"), "--stage", str(stage), "--out", str(out), *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert proc.returncode == (0 if result["ok"] else 1), proc.stderr[-3000:]
    return result


@pytest.mark.parametrize("stage,extra", [(2, ()), (3, ("--max-grad-norm", "0.3"))])
def test_zero_step_equals_the_single_process_step(tmp_path, stage, extra):
    r = run_check(tmp_path, stage, *extra)
    assert r["ranks"] == 2 and r["stage"] == stage and not r["bf16"]
    z, ref = r["zero_stats"], r["reference_stats"]
    # the check's batch (5 sequences, 60-token micro-batches) needs more than one pass per rank
    assert z["micro_batches"] >= 2 and z["loss_tokens"] == ref["loss_tokens"] and z["sequences"] == 5
    if extra:  # clipping is on: the gradient norm is past the limit, the compared gradients are clipped
        assert ref["grad_norm"] > 0.3
    d = r["differences"]
    assert d["loss"] < 1e-5 and d["grad_norm"] < 1e-4 and d["grads"] < 1e-4, d
    assert d["weights"] < 5e-2, d  # in units of lr: the step itself is about 1
    assert r["ok"]


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeeds_own_clipping_shapes_the_update(tmp_path, stage):
    """The compared gradients are clipped by the check itself, and AdamW's first step is about
    lr * sign(g) at any scale; with eps far above |g| the step is about lr * g / eps, so the update
    differs by the clip coefficient unless DeepSpeed's `gradient_clipping` clipped as the reference did."""
    r = run_check(tmp_path, stage, "--max-grad-norm", "0.1", "--adam-eps", "1.0")
    assert r["reference_stats"]["grad_norm"] > 0.3  # the clip scales the gradient by less than 1/3
    d = r["differences"]
    assert d["update"] < 1e-3 and d["grads"] < 1e-4, d
    assert r["ok"]
