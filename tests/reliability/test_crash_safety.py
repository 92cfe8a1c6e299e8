"""Crash safety: stages killed with SIGKILL at seeded random points and restarted end where a straight
run ends, with no record lost, duplicated or half-written, and every paid LLM call in the ledger once.

Real subprocesses (`tests.reliability.crash_driver`), the real client and litellm against a local
OpenAI-compatible server, the in-memory sandbox double. `benchmarks/crash.py` runs the long form
(10 kills a stage); here a short one: two kills of each cheap stage, and one kill of training
after its first checkpoint, which must resume from it with the same step count and optimizer state.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mirl.llm.ledger import Ledger, open_ledger
from mirl.runner import Item, Stage, run_stage
from tests.reliability import crash_driver
from tests.reliability.crash_harness import REPO, child_env, crash_stage, reference_pipeline, table
from tests.reliability.fault_server import FaultServer

KILLS = {"profiling": 2, "taxonomy": 2, "prefixes": 2, "misbehavior_rate": 2, "pass_at_k": 2}


# --- the pieces a kill can break, each on its own -------------------------------------------------


def test_a_torn_ledger_row_does_not_swallow_the_next_one(tmp_path):
    path = tmp_path / "llm_calls.jsonl"
    Ledger(path).record(role="policy", stage="s", model="m", cost_usd=0.5)
    with open(path, "a") as f:  # a process killed mid-row
        f.write('{"time": 1, "role": "policy", "stage": "s", "cost_u')
    again = Ledger(path)
    assert again.spent() == pytest.approx(0.5)
    again.record(role="policy", stage="s", model="m", cost_usd=0.25)
    rows = [json.loads(line) for line in path.read_text().splitlines()]  # every line is a whole row
    assert [r["cost_usd"] for r in rows] == [0.5, 0.25]
    assert Ledger(path).spent("s") == pytest.approx(0.75) and again.spent("s") == pytest.approx(0.75)


def test_a_ledger_sees_the_rows_another_process_appended(tmp_path):
    mine = open_ledger(tmp_path)
    mine.record(role="policy", stage="s", model="m", cost_usd=0.5)
    code = ("import sys; from mirl.llm.ledger import Ledger; "
            "Ledger(sys.argv[1]).record(role='policy', stage='s', model='m', cost_usd=0.25)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "llm_calls.jsonl")], check=True, env=child_env())
    assert mine.spent("s") == pytest.approx(0.75) and mine.spent() == pytest.approx(0.75)


class Ordered(Stage):
    """Items finish in reverse order (each waits for the one after it); finalize lists what it saw."""

    name = "ordered"
    records = "ordered.jsonl"
    key_fields = ("k",)

    def __init__(self, run_dir, n=4):
        super().__init__(None, run_dir)
        self.n, self.done = n, {k: threading.Event() for k in range(n + 1)}
        self.done[n].set()
        self.seen = []

    @property
    def workers(self):
        return self.n

    def fingerprint(self):
        return {"n": self.n}

    def plan(self):
        return [Item((k,), k) for k in range(self.n)]

    def run_item(self, k):
        self.done[k + 1].wait(30)
        time.sleep(0.05)
        self.done[k].set()
        return {"k": k}

    def finalize(self, records):
        self.seen = [r["k"] for r in records]
        return {}


def test_finalize_sees_records_in_plan_order_whatever_order_they_finished_in(tmp_path):
    stage = Ordered(tmp_path)
    run_stage(stage, progress=False)
    stored = [json.loads(line)["k"] for line in (tmp_path / "ordered" / "ordered.jsonl").read_text().splitlines()]
    assert stored == [3, 2, 1, 0]  # written as they finished
    assert stage.seen == [0, 1, 2, 3]  # derived outputs are built in plan order


SLOW_STAGE = """
import sys, time
from mirl.runner import Item, Stage, run_stage
class Slow(Stage):
    name, records, key_fields = "slow", "slow.jsonl", ("k",)
    def fingerprint(self): return {}
    def plan(self): return [Item((k,), k) for k in range(4)]
    def run_item(self, k):
        time.sleep(0.5)
        return {"k": k}
run_stage(Slow(None, sys.argv[1]), progress=False)
"""


def test_a_restart_waits_for_a_process_still_running_the_stage(tmp_path):
    from mirl.runner.stage import StageError, stage_lock

    class Slow(Stage):
        name, records, key_fields = "slow", "slow.jsonl", ("k",)

    # a killed batch's kernel that has not noticed yet: the same stage, still writing
    first = subprocess.Popen([sys.executable, "-c", SLOW_STAGE, str(tmp_path)], env=child_env())
    records = tmp_path / "slow" / "slow.jsonl"
    deadline = time.monotonic() + 60
    while not records.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(StageError, match="another process is running stage 'slow'"):
        with stage_lock(Slow(None, tmp_path), wait_s=0.3):
            pass
    with stage_lock(Slow(None, tmp_path), wait_s=60):  # waits for it, then has the stage to itself
        assert [json.loads(line)["k"] for line in records.read_text().splitlines()] == [0, 1, 2, 3]
    assert first.wait(30) == 0


# --- every cheap stage, killed and restarted --------------------------------------------------------


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    os.environ.setdefault(crash_driver.KEY_ENV, "sk-crash-test-key-0000")
    server = FaultServer(reply=crash_driver.reply).start()
    root = tmp_path_factory.mktemp("crash")
    try:
        yield reference_pipeline(root, server.url), server, root
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)  # gigabytes of checkpoints: not left for the rest of the suite


@pytest.mark.timeout(600)
@pytest.mark.parametrize("stage", list(KILLS))
def test_a_killed_stage_restarts_to_the_straight_runs_outputs(pipeline, stage):
    ref, server, root = pipeline
    result = crash_stage(stage, ref, root / "crash" / stage, server.served, KILLS[stage],
                         random.Random(f"crash-{stage}"))
    report = table([result]) + "\n" + "\n".join(result.differences)
    assert result.kills >= 1, report  # at least one kill landed while the stage ran
    assert result.differences == [], report
    assert (result.lost, result.duplicated, result.torn) == (0, 0, 0), report
    assert (result.ledger_double, result.ledger_torn) == (0, 0), report
    # a reply can only go unbilled when the process was killed with its request in flight
    assert result.ledger_unbilled <= result.kills * 2, report
    assert result.survived, report


# --- training: killed after a checkpoint, resumed from it -------------------------------------------


def _optimizer(path: Path) -> dict:
    import torch

    return torch.load(path / "optimizer.pt", map_location="cpu", weights_only=False)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_killed_training_resumes_from_its_checkpoint_with_its_step_count_and_optimizer_state(pipeline):
    from tests.engines.smollm2 import require_smollm2

    require_smollm2()
    ref, server, root = pipeline
    run = root / "training"
    shutil.copytree(ref.final, run)
    ckpts = run / "training" / "checkpoints"
    cmd = [sys.executable, "-m", "tests.reliability.crash_driver", "training", str(run), ref.url]
    proc = subprocess.Popen(cmd, cwd=REPO, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 900
    while proc.poll() is None and not (ckpts / "step-000001" / "state.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(random.Random("training").uniform(0.0, 2.0))  # into step 2: its rollouts, or its update
    assert proc.poll() is None, "training ended before the kill"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert not (ckpts / "step-000003").exists()
    saved = {int(p.name[5:]): p for p in ckpts.glob("step-*") if (p / "state.json").exists()}
    last = max(saved)
    # only the newest checkpoint keeps the optimizer state; the others keep their weights
    assert {s for s, p in saved.items() if (p / "optimizer.pt").exists()} == {last}
    weights = {s: hashlib.sha256((p / "model.safetensors").read_bytes()).hexdigest() for s, p in saved.items()}
    resumed = subprocess.run(cmd, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=1200)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming after step {last}" in resumed.stderr
    metrics = [json.loads(line) for line in (run / "training" / "metrics.jsonl").read_text().splitlines()]
    steps = crash_driver.training_params(ref.url).training.steps
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))  # each step once, none lost
    rollouts = [json.loads(line) for line in (run / "training" / "rollouts.jsonl").read_text().splitlines()]
    keys = [(r["step"], r["draw"], r["sample"]) for r in rollouts]
    assert len(keys) == len(set(keys)) and {r["step"] for r in rollouts} == set(range(1, steps + 1))
    # the checkpoints the resume found kept their weights; the newest alone keeps an optimizer state
    after = {int(p.name[5:]): p for p in ckpts.glob("step-*")}
    assert {s: hashlib.sha256((after[s] / "model.safetensors").read_bytes()).hexdigest() for s in saved} == weights
    assert {s for s, p in after.items() if (p / "optimizer.pt").exists()} == {steps}
    # the run went on from the optimizer state it loaded: its counts include the steps before the kill
    trained = sum(1 for m in metrics if not m.get("skipped"))
    final = _optimizer(after[steps])
    assert final["steps"] == trained  # the learner's count went on from the checkpoint, not from zero
    adam_steps = {float(s["step"]) for s in final["optimizer"]["state"].values()}
    assert adam_steps == {float(trained)}, adam_steps  # AdamW's own step counters too
    assert int(json.loads((ckpts / f"step-{steps:06d}" / "state.json").read_text())["step"]) == steps
