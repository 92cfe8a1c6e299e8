"""The paper's policy pricing rule and its rollout estimate, against hand-computed values."""

from __future__ import annotations

import pytest

from mirl.cost import estimate_rollouts, policy_cost_usd
from mirl.cost.params import PAPER_PRICES
from mirl.cost.policy import measured_policy_cost_usd
from mirl.reported import read_costs

QWEN4B = {"input": 0.33, "cached_input": 0.066, "output": 1.005}


def test_uncached_share_is_two_over_the_average_steps():
    # 4 steps: half the input uncached. 1M input, 100k output.
    assert policy_cost_usd(1_000_000, 100_000, 4, QWEN4B) == pytest.approx(0.5 * 0.33 + 0.5 * 0.066 + 0.1 * 1.005)
    # 20 steps: a tenth uncached
    assert policy_cost_usd(10_000_000, 0, 20, QWEN4B) == pytest.approx(10 * (0.1 * 0.33 + 0.9 * 0.066))


def test_a_rollout_of_two_steps_or_fewer_is_all_uncached():
    for steps in (1, 1.5, 2):
        assert policy_cost_usd(1_000_000, 0, steps, QWEN4B) == pytest.approx(0.33)
    with pytest.raises(ValueError, match="steps_per_rollout must be positive"):
        policy_cost_usd(1, 1, 0, QWEN4B)


def test_cached_price_defaults_to_input_and_measured_rule_uses_recorded_cache():
    assert policy_cost_usd(1_000_000, 0, 10, {"input": 2.0, "output": 8.0}) == pytest.approx(2.0)
    assert measured_policy_cost_usd(1_000_000, 750_000, 200_000, QWEN4B) == pytest.approx(
        0.25 * 0.33 + 0.75 * 0.066 + 0.2 * 1.005)


def test_paper_table_is_the_default_price_of_the_policy():
    assert {k: PAPER_PRICES["Qwen3.5-4B"][k] for k in QWEN4B} == QWEN4B


def test_rollout_estimate_reproduces_tmax_4b():
    est = estimate_rollouts(200, 8, 32, 0.325)
    assert est == pytest.approx(200 * 8 * 32 / 0.675)
    reported = read_costs("params/paper_reported.yaml")["recipes"]["TMax-4B"]
    e = reported["estimate"]
    assert round(estimate_rollouts(int(e["steps"]), int(e["batch"]), int(e["group"]), e["dead_share"]), -2) \
        == reported["total"]["rollouts"] == 75_900
    assert estimate_rollouts(10, 2, 4, 0.0) == 80
    with pytest.raises(ValueError, match="dead_share"):
        estimate_rollouts(10, 2, 4, 1.0)
