"""The demo's path for real: the stage with SmolLM2 as policy, several episodes at once on bubblewrap,
their steps decoded together by the embedded model's batcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirl.engines import registry
from mirl.llm.ledger import read_ledger
from mirl.params import make
from mirl.profiling.stage import load_trajectories, run_profiling
from tests.real import missing

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.bwrap]


@pytest.mark.timeout(900)
def test_concurrent_smollm2_episodes_share_decode_batches(tmp_path):
    from mirl.sandbox.bwrap_backend import available
    from tests.engines.smollm2 import require_smollm2

    require_smollm2()
    if not available():
        missing("bubblewrap or the base root filesystem", "`apt-get install bubblewrap`, then `mirl image build`")
    lm = registry.get("smollm2")
    lm._batcher.max_rows_seen = 0
    p = make(profiling={"tasks": "tasks", "max_tasks": 3, "seeds": 2, "workers": 6}, sandbox={"backend": "bwrap"},
             agent={"max_steps": 2, "command_timeout_s": 30},
             models={"policy": {"model": "local/smollm2", "temperature": 0.7, "max_tokens": 24}})
    summary = run_profiling(p, tmp_path)
    assert summary["episodes"] == 6 and summary["environments"] == 3
    trajectories = load_trajectories(tmp_path)
    assert len(trajectories) == 6 and all(t["exit_reason"] in ("submitted", "step_limit") for t in trajectories)
    assert lm._batcher.max_rows_seen >= 2  # episodes' requests were decoded together
    calls = read_ledger(tmp_path)
    assert len(calls) == summary["llm"]["policy"]["calls"] and (calls["output_tokens"] <= 24).all()
    assert summary["steps"] == sum(len(t["steps"]) for t in trajectories)
    assert all(1 <= len(t["steps"]) <= 2 for t in trajectories)
