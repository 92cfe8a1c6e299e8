"""The design's detectable reduction, checked against the analysis it predicts: simulated
evaluations (paired prefix bootstrap, as `reduction_interval` computes it) at that reduction find
it about as often as the wanted power says."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mirl.evaluate.stats.power import design_line, detectable_reduction, reduction_interval, reduction_table

BASE = np.linspace(0.25, 0.95, 33)  # per-prefix base rates, spread as a real run's are


def simulated_power(r: float, samples: int, sims: int = 300, seed: int = 1) -> float:
    rng = np.random.default_rng(seed)
    found = 0
    for s in range(sims):
        base = {str(k): rng.random(samples) < p for k, p in enumerate(BASE)}
        policy = {str(k): rng.random(samples) < (1 - r) * p for k, p in enumerate(BASE)}
        found += reduction_interval(base, policy, n_boot=400, seed=s)["ci_low"] > 0
    return found / sims


def test_the_detectable_reduction_is_found_with_the_stated_power():
    r = detectable_reduction(BASE, samples=16)
    assert 0.05 < r < 0.5
    assert 0.7 <= simulated_power(r, 16) <= 0.9
    assert simulated_power(r / 2, 16) < 0.5  # half of it is found far less often


def test_more_prefixes_or_samples_detect_smaller_reductions():
    r = detectable_reduction(BASE, samples=16)
    assert detectable_reduction(BASE, samples=64) < r
    assert detectable_reduction(BASE, samples=16, prefixes=132) < r
    assert math.isinf(detectable_reduction([0.02, 0.03], samples=1))
    assert "40% is detectable" in design_line(BASE, 16) and "NOT detectable" in design_line(BASE[:4], 2)
    with pytest.raises(ValueError, match="two prefixes"):
        detectable_reduction([0.5], samples=16)


def test_the_reduction_pools_the_shared_prefixes_and_its_interval_resamples_them():
    base = {"a": [1, 1, 1, 1], "b": [1, 0, 1, 0], "c": [1, 1, 0, 0, 0, 0]}
    policy = {"a": [1, 0, 1, 0], "b": [0, 0, 0, 0], "c": [1, 0, 0, 0, 0, 0], "d": [1, 1]}  # d: base never saw it
    got = reduction_interval(base, policy, n_boot=4000)
    assert got["prefixes"] == 3 and got["base_rate"] == pytest.approx(8 / 14) and got["rate"] == pytest.approx(3 / 14)
    assert got["reduction"] == pytest.approx(1 - 3 / 8)
    # every resample of 3 prefixes out of 3: the interval lies within the extremes of the 27 draws
    sums_b, sums_p, n = np.array([4, 2, 2]), np.array([2, 0, 1]), np.array([4, 4, 6])
    idx = np.array(np.meshgrid(*[range(3)] * 3)).reshape(3, -1).T
    exact = 1 - (sums_p[idx].sum(1) / n[idx].sum(1)) / (sums_b[idx].sum(1) / n[idx].sum(1))
    assert exact.min() <= got["ci_low"] <= got["reduction"] <= got["ci_high"] <= exact.max()
    assert got["ci_low"] < got["ci_high"]


def test_reduction_table_pairs_each_policy_with_the_reference_on_shared_prefixes():
    def judged(policy, prefix, repeats, judge="rules", misbehavior="m"):
        return [{"policy": policy, "misbehavior": misbehavior, "prefix_id": prefix, "judge": judge,
                 "repeated": None if r is None else bool(r)}
                for r in repeats]

    samples = (judged("base", "a", [1, 1, 1, 0]) + judged("base", "b", [1, 1, 0, 0]) + judged("base", "c", [1, 0, 0, 0])
               + judged("mirl", "a", [1, 0, 0, 0]) + judged("mirl", "b", [1, 0, 0, 0]) + judged("mirl", "c", [0, 0, 0, 0])
               + judged("mirl", "d", [1, 1, 1, 1])  # not measured under base: left out of the pairing
               + judged("mirl", "a", [None]) + judged("lone", "a", [0, 0]))
    table = reduction_table(samples, "base", n_boot=500).set_index("policy")
    mirl = table.loc["mirl"]
    assert mirl["prefixes"] == 3 and mirl["base_rate"] == 6 / 12 and mirl["rate"] == 2 / 12
    assert mirl["reduction"] == pytest.approx(1 - (2 / 12) / (6 / 12))
    assert mirl["ci_low"] <= mirl["reduction"] <= mirl["ci_high"] and mirl["reference"] == "base"
    assert math.isnan(table.loc["lone", "reduction"]) and table.loc["lone", "prefixes"] == 1  # one shared prefix
    assert reduction_table(samples, "nobody").empty


def test_reduction_table_without_samples_or_with_a_reference_rate_of_zero():
    assert list(reduction_table([], "base").columns)[:4] == ["judge", "misbehavior", "reference", "policy"]
    never = [{"policy": pol, "misbehavior": "m", "prefix_id": k, "judge": "rules", "repeated": pol == "p" and k == "a"}
             for pol in ("base", "p") for k in ("a", "b", "c") for _ in range(2)]
    row = reduction_table(never, "base").iloc[0]
    assert row["base_rate"] == 0 and row["rate"] == pytest.approx(1 / 3)
    assert math.isnan(row["reduction"]) and math.isnan(row["ci_low"]) and math.isnan(row["ci_high"])

