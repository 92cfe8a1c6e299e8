"""The paper's cost arithmetic, one test per headline number: each printed value of Figures 9 and 10
recomputed from the inputs the paper prints (Table 1, Appendix C, the dead-group shares and best
checkpoints of section 4.5), by the kit's formulas, within the rounding of what is printed."""

from __future__ import annotations

import pytest

from mirl import reported
from mirl.cost.arithmetic import (
    estimate_environments,
    implied_steps_per_rollout,
    paper_arithmetic,
    recipe_rollouts,
)
from mirl.cost.params import PAPER_PRICES, PAPER_RATES
from mirl.cost.policy import estimate_rollouts, policy_cost_usd
from mirl.llm.pricing import usd_price

PAPER = reported.read()
F9, F10 = PAPER["figure9"], PAPER["figure10"]
TOTAL9 = {n: r["total"] for n, r in F9["recipes"].items()}
TOTAL10 = {n: r["total"] for n, r in F10["recipes"].items()}
POLICY = usd_price("Qwen3.5-4B", PAPER_PRICES["Qwen3.5-4B"], PAPER_RATES)  # Table 4: Tinker's prices
ROWS = {r["quantity"]: r for r in paper_arithmetic(PAPER, POLICY)}
HALF_K = 50  # a count printed as 26.2K is known to +-50


def test_tmax_4b_rollouts_are_s_b_g_over_one_minus_d():
    """Appendix C: S = 200, B = 8, G = 32, d = 32.5% give 75.9K."""
    assert estimate_rollouts(200, 8, 32, 0.325) == pytest.approx(TOTAL9["TMax-4B"]["rollouts"], abs=HALF_K)
    assert ROWS["TMax-4B rollouts"]["recomputed"] == pytest.approx(75_851.85, abs=0.01)


def test_tmax_4b_environments_are_s_b_over_one_minus_d():
    """Appendix C: S*B/(1-d) = 2,370, the environments Figure 9 gives TMax-4B."""
    assert round(estimate_environments(200, 8, 0.325)) == TOTAL9["TMax-4B"]["environments"] == 2370


def test_mirl_rollouts_are_profiling_plus_rl_up_to_step_100():
    """2,017 environments x 2 rollouts of error profiling, then 100 steps of 8 groups of 16 with 42.2% dead."""
    assert recipe_rollouts(100, 8, 16, 0.422, preprocessing=2017 * 2) == pytest.approx(TOTAL10["MiRL"]["rollouts"], abs=HALF_K)
    assert ROWS["MiRL rollouts"]["recomputed"] == pytest.approx(2017 * 2 + 100 * 128 / 0.578)


def test_rar_rollouts_are_80_steps_with_almost_no_dead_groups():
    assert recipe_rollouts(80, 8, 16, 0.0013) == pytest.approx(TOTAL10["RaR+"]["rollouts"], abs=HALF_K)


def test_pivotrl_rollouts_are_its_step_profiling_actions_plus_595_steps():
    """3,892 candidates x 8 actions, then 595 steps of 8 pivots x 16 one-step actions with 25.3% dead."""
    assert recipe_rollouts(595, 8, 16, 0.253, preprocessing=3892 * 8) == pytest.approx(TOTAL10["PivotRL"]["rollouts"], abs=HALF_K)


def test_tmax_189_rollouts_imply_about_150_steps_to_its_best_checkpoint():
    """Its best step is not printed; 26.4K rollouts at 27.3% dead groups imply 150 (149.9)."""
    assert ROWS["TMax-189 best step (not printed)"]["recomputed"] == pytest.approx(150, abs=0.1)
    assert recipe_rollouts(150, 8, 16, 0.273) == pytest.approx(TOTAL10["TMax-189"]["rollouts"], abs=HALF_K)


@pytest.mark.parametrize("resource", ["rollouts", "input_tokens", "output_tokens", "environments", "gpu_hours",
                                      "total_usd"])
def test_figure9_changes_against_tmax_4b(resource):
    """Each printed change (-65%, -66%, -72%, -15%, -61%, -44%) from the two totals, within a point: the
    paper rounds percentages of its unrounded totals (262M / 919M is -71.5% here, -72% there)."""
    label = {"input_tokens": "input tokens", "output_tokens": "output tokens", "gpu_hours": "GPU hours",
             "total_usd": "total cost"}.get(resource, resource)
    row = ROWS[f"MiRL {label}, % change against TMax-4B"]
    assert row["printed"] == F9["change_percent"][resource]
    assert row["recomputed"] == pytest.approx(row["printed"], abs=1.0)


def test_figure9_shares_of_tmax_4b_in_the_text():
    """35% of the rollouts, 34% of the input tokens, 28% of the output tokens, 39% of the GPU hours and
    56% of the total cost (section 4.5)."""
    for resource, printed in F9["share_percent"].items():
        assert 100 * TOTAL9["MiRL"][resource] / TOTAL9["TMax-4B"][resource] == pytest.approx(printed, abs=1.0), resource


def test_pivotrl_total_cost_is_its_one_step_tokens_uncached_plus_its_api_fee():
    """A one-step rollout has no cache to reuse (2 / 1 steps >= 1): all 1.3B input tokens at $0.33/M,
    53M output at $1.005/M, plus $519.5 of judge fees, within the rounding of 1.3B and 53M."""
    t = TOTAL10["PivotRL"]
    assert policy_cost_usd(t["input_tokens"], t["output_tokens"], 1.0, POLICY) + t["api_usd"] == pytest.approx(1001.765)
    low = policy_cost_usd(1.25e9, 52.5e6, 1.0, POLICY) + t["api_usd"]
    high = policy_cost_usd(1.35e9, 53.5e6, 1.0, POLICY) + t["api_usd"]
    assert low <= t["total_usd"] <= high


def test_tmax_4b_is_priced_with_tmax_189s_steps_per_rollout():
    """Appendix C estimates TMax-4B from the TMax-189 run: the steps per rollout its total implies
    (29.2) agree with TMax-189's (30.0) within a step, and both lie inside the 64-step limit."""
    tmax4 = ROWS["TMax-4B steps per rollout (not printed)"]["recomputed"]
    tmax189 = ROWS["TMax-189 steps per rollout (not printed)"]["recomputed"]
    assert tmax4 == pytest.approx(tmax189, abs=1.0) and 2 < tmax4 < 64
    t = TOTAL9["TMax-4B"]
    priced = policy_cost_usd(t["input_tokens"], t["output_tokens"], tmax189, POLICY)
    assert priced == pytest.approx(t["total_usd"], rel=0.01)  # $3,507 against the printed $3,521.5


def test_mirl_total_is_its_policy_tokens_plus_api_fees_at_about_21_steps():
    """MiRL's $1,960.3 = the policy's 10.5B/262M tokens at Tinker's prices + $737.1 of API fees, which
    the rule meets at 20.8 steps per rollout (prefix starts run shorter than TMax-189's 30)."""
    t = TOTAL9["MiRL"]
    steps = implied_steps_per_rollout(t["total_usd"], t["api_usd"], t["input_tokens"], t["output_tokens"], POLICY)
    assert steps == pytest.approx(20.77, abs=0.01)
    assert policy_cost_usd(t["input_tokens"], t["output_tokens"], steps, POLICY) + t["api_usd"] == pytest.approx(t["total_usd"])
    rar = ROWS["RaR+ steps per rollout (not printed)"]["recomputed"]
    assert 20 < rar < 64  # RaR+ starts at step 0 too


def test_table4_prices_are_the_cost_reports_defaults_and_the_cny_rate_makes_round_dollars():
    prices = PAPER["table4"]["prices"].set_index("model")
    names = {"Qwen3.5-4B": "Qwen3.5-4B", "Qwen3.8-27B": "Qwen3.8-27B", "Gemini 3.8 Flash": "gemini-3.8-flash",
             "Claude Opus 5": "claude-opus-5"}
    for paper_name, key in names.items():
        row, kit = prices.loc[paper_name], PAPER_PRICES[key]
        assert (row["input"], row["cached_input"], row["output"], row["currency"]) == (
            kit["input"], kit["cached_input"], kit["output"], kit["currency"]), paper_name
    qwen = usd_price("Qwen3.8-27B", PAPER_PRICES["Qwen3.8-27B"], PAPER_RATES)
    assert {k: round(v, 3) for k, v in qwen.items()} == {"input": 0.5, "cached_input": 0.1, "output": 3.0}
