"""The resource table of a run: ledger sums, policy tokens from rollouts, cuts up to a checkpoint,
repricing in another currency, device time, priced totals (runs built in tests/cost/fixtures.py)."""

from __future__ import annotations

import json

import pytest

from mirl.cost.params import PAPER_PRICES, PAPER_RATES
from mirl.cost.resources import resources
from mirl.cost.totals import checkpoint_step, price, totals, up_to
from mirl.runner.devices import record_device_time
from tests.cost.fixtures import training_run

QWEN4B = PAPER_PRICES["Qwen3.5-4B"]


@pytest.fixture
def run(tmp_path):
    return training_run(tmp_path / "r")


def ledger_rows(run):
    return [json.loads(line) for line in (run / "llm_calls.jsonl").read_text().splitlines()]


def test_ledger_sums_equal_the_recorded_calls(run):
    df = resources(run)
    llm = df[df["source"] == "llm"]
    rows = ledger_rows(run)
    for role in {r["role"] for r in rows}:
        mine = [r for r in rows if r["role"] == role]
        got = llm[llm["role"] == role]
        assert got["llm_calls"].sum() == sum(not r["cache_hit"] for r in mine), role
        assert got["llm_input_tokens"].sum() == sum(r["input_tokens"] for r in mine), role
        assert got["llm_output_tokens"].sum() == sum(r["output_tokens"] for r in mine), role
    # API fees: every role but the policy; by hand 12 x $0.01 + $0.50 + 6 x $0.02
    assert df["api_usd"].sum() == pytest.approx(sum(r["cost_usd"] for r in rows if r["role"] != "policy"))
    assert df["api_usd"].sum() == pytest.approx(0.74)


def test_policy_tokens_come_from_the_rollouts_once(run):
    t = totals(resources(run), ("run",)).iloc[0]
    assert t["rollouts"] == 3 + 6 and t["policy_calls"] == 12 + 18
    assert t["policy_input_tokens"] == 9000 + 2 * 300 * (1 + 2 + 3)
    assert t["policy_cached_input_tokens"] == 6000 + 2 * 200 * (1 + 2 + 3)
    assert t["policy_output_tokens"] == 600 + 2 * 30 * (1 + 2 + 3)
    assert t["sandbox_hours"] * 3600 == pytest.approx((2.5 + 3.5 + 5.5) + 6 * 1.5 + (2.0 + 2.0))
    assert t["environments"] == 4  # env-a, env-b, env-c (a prefix check), env-d


def test_a_stage_without_stored_rollouts_takes_its_policy_tokens_from_the_ledger(run):
    (run / "training" / "rollouts.jsonl").unlink()
    (run / "training" / "metrics.jsonl").unlink()
    t = totals(resources(run), ("run", "stage")).set_index("stage")
    # training's policy ledger rows: 6 calls per step of 100*s input, 10*s output
    assert t.loc["training", "policy_input_tokens"] == 6 * 100 * (1 + 2 + 3)
    assert t.loc["training", "policy_calls"] == 18 and t.loc["training", "rollouts"] == 0
    assert t.loc["profiling", "policy_input_tokens"] == 9000


@pytest.mark.parametrize("with_time", [False, True], ids=["checkpoint-times", "metrics-times"])
def test_cut_up_to_the_selected_checkpoint(tmp_path, with_time):
    run = training_run(tmp_path / "r", with_time=with_time)
    df = resources(run)
    assert checkpoint_step(run, "selected") == 2
    # validation's pick among the top (`selected`) is the cut, not the best by smoothed reward
    sel = run / "training" / "selection.json"
    sel.write_text(json.dumps({**json.loads(sel.read_text()), "selected": 3}))
    assert checkpoint_step(run, "selected") == 3
    sel.write_text(json.dumps({**json.loads(sel.read_text()), "selected": None}))  # validation rated none
    assert checkpoint_step(run, "selected") == 2
    assert checkpoint_step(run, "last") == 3 and checkpoint_step(run, "1") == 1
    with pytest.raises(ValueError, match="up_to must be"):
        checkpoint_step(run, "best")
    cut = up_to(df, 2)
    t = totals(cut, ("run", "phase")).set_index("phase")
    assert t.loc["rl", "rollouts"] == 4 and t.loc["preprocessing", "rollouts"] == 3
    judge = cut[cut["role"] == "behavior_judge"]
    assert judge["llm_calls"].sum() == 4 and sorted(judge["step"].unique()) == [1, 2]
    # the rubric writer ran in the training stage before step 1: preprocessing, always inside the cut
    assert t.loc["preprocessing", "api_usd"] == pytest.approx(0.12 + 0.5)
    assert t.loc["rl", "api_usd"] == pytest.approx(4 * 0.02)
    # wall time: steps 1 and 2, plus the stage's set-up outside steps (200 s - 41 - 42 - 43)
    assert t.loc["rl", "wall_hours"] * 3600 == pytest.approx(41 + 42 + (200 - 126))
    assert totals(up_to(df, None), ("run",)).iloc[0]["rollouts"] == 9


def test_unpriced_ledger_rows_are_priced_from_params_in_their_currency(run):
    df = resources(run, PAPER_PRICES, PAPER_RATES)
    ann = df[df["role"] == "annotator"]
    assert set(ann["price"]) == {"params"}
    assert ann["api_usd"].sum() == pytest.approx(3 * (10_000 * 3.646 + 2_000 * 21.875) / 1e6 * 0.13714)
    # the embedded policy is not in the table and stays out of the API fees
    assert df.loc[df["role"] == "policy", "api_usd"].sum() == 0


def test_device_time_recorded_per_step_and_declared_hardware(run):
    record_device_time(run, "training", 40.0, device="NVIDIA A100", count=2, step=1)
    record_device_time(run, "training", 50.0, device="NVIDIA A100", count=2, step=3)
    record_device_time(run, "prefixes", 9.0, device="cpu")
    hw = {"profiling": {"kind": "A100", "count": 8}, "training": {"kind": "A100", "count": 99}}
    df = resources(run, hardware=hw)
    t = totals(up_to(df, 2), ("run",)).iloc[0]
    # step 1's recorded 2 x 40 s; profiling's 100 s wall x 8 declared; training's own record wins over hw
    assert t["gpu_hours"] * 3600 == pytest.approx(2 * 40 + 100 * 8)
    assert t["device_hours"] * 3600 == pytest.approx(2 * 40 + 100 * 8 + 9)
    assert totals(df, ("run",)).iloc[0]["gpu_hours"] * 3600 == pytest.approx(2 * 40 + 2 * 50 + 800)


def test_a_device_row_after_a_kill_mid_write_is_not_lost(tmp_path):
    from mirl.runner.devices import DEVICE_FILE, read_device_time

    record_device_time(tmp_path, "training", 40.0, device="cpu", step=1)
    with (tmp_path / DEVICE_FILE).open("a") as f:
        f.write('{"time": 1, "stage": "train')  # killed mid-write
    record_device_time(tmp_path, "training", 50.0, device="cpu", step=2)
    assert [r["step"] for r in read_device_time(tmp_path)] == [1, 2]


def test_priced_totals_by_the_paper_rule_and_the_measured_cache(run):
    t = totals(up_to(resources(run), 2), ("run", "phase"))
    paper = price(t, QWEN4B, "paper").set_index("phase")
    # preprocessing: 12 calls / 3 rollouts = 4 steps -> half of 9000 input uncached; 600 output
    pre = (4500 * 0.33 + 4500 * 0.066 + 600 * 1.005) / 1e6
    # rl up to step 2: 12 calls / 4 rollouts = 3 steps -> 2/3 of 1800 uncached; 180 output
    rl = (1200 * 0.33 + 600 * 0.066 + 180 * 1.005) / 1e6
    assert paper.loc["preprocessing", "steps_per_rollout"] == 4 and paper.loc["rl", "steps_per_rollout"] == 3
    assert paper.loc["preprocessing", "policy_usd"] == pytest.approx(pre)
    assert paper.loc["rl", "policy_usd"] == pytest.approx(rl)
    assert paper.loc["rl", "total_usd"] == pytest.approx(rl + 0.08)
    measured = price(t, QWEN4B, "measured").set_index("phase")
    assert measured.loc["preprocessing", "policy_usd"] == pytest.approx((3000 * 0.33 + 6000 * 0.066 + 600 * 1.005) / 1e6)
    cny = {"input": 3.646, "cached_input": 0.729, "output": 21.875, "currency": "CNY"}
    in_cny = price(t, cny, "paper", {"CNY": 0.5}).set_index("phase")
    assert in_cny.loc["rl", "policy_usd"] == pytest.approx((1200 * 3.646 + 600 * 0.729 + 180 * 21.875) / 1e6 * 0.5)
    unpriced = price(t, None).set_index("phase")
    assert unpriced.loc["rl", "total_usd"] == pytest.approx(0.08)


def test_device_hours_count_only_device_rows_inside_the_cut():
    import pandas as pd

    from mirl.cost.stage import CostReport

    rows = pd.DataFrame([
        {"run": "a", "stage": "training", "device": "H200", "source": "device", "device_s": 5400.0, "counted": True},
        {"run": "a", "stage": "training", "device": "H200", "source": "device", "device_s": 1800.0, "counted": True},
        {"run": "a", "stage": "training", "device": "H200", "source": "device", "device_s": 3600.0, "counted": False},
        {"run": "a", "stage": "profiling", "device": "", "source": "ledger", "device_s": 0.0, "counted": True},
    ])
    rep = CostReport(resources=rows, totals=None, stages=None, roles=None, comparison=None, cuts={}, reference="",
                     policy_price=None)
    assert rep.device_hours().to_dict("records") == [
        {"run": "a", "stage": "training", "device": "H200", "device_hours": 2.0}]
    assert CostReport(rows[rows["source"] == "ledger"], *[None] * 4, {}, "", None).device_hours().empty
