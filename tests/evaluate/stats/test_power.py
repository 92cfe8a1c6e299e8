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


def test_the_stratified_design_is_found_with_the_stated_power_where_the_pooled_one_overpromises():
    """The analysis weighs each misbehavior alike; one with 4 prefixes beside one with 20 adds more noise
    than pooling the 24 prefixes says: the pooled design's reduction is found far less often than 80%."""
    from mirl.evaluate.stats.power import stratified_detectable, stratified_reduction

    strata = {"m1": np.linspace(0.3, 0.9, 20), "m2": np.array([0.4, 0.6, 0.8, 0.5])}
    n = 8

    def found(r: float, sims: int = 300) -> float:
        rng, hits = np.random.default_rng(1), 0
        for s in range(sims):
            base = {m: {f"{m}{k}": rng.random(n) < p for k, p in enumerate(v)} for m, v in strata.items()}
            policy = {m: {f"{m}{k}": rng.random(n) < (1 - r) * p for k, p in enumerate(v)} for m, v in strata.items()}
            hits += stratified_reduction(base, policy, n_boot=400, seed=s)["ci_low"] > 0
        return hits / sims

    r = stratified_detectable(strata, n, {m: len(v) for m, v in strata.items()})
    pooled = detectable_reduction(np.concatenate(list(strata.values())), n)
    assert pooled < r
    assert 0.7 <= found(r) <= 0.95
    assert found(pooled) < 0.72
    # one misbehavior is the single-list design; a misbehavior measured without rates is refused
    assert stratified_detectable({"a": BASE}, 16, {"a": 33}) == pytest.approx(detectable_reduction(BASE, 16))
    with pytest.raises(ValueError, match="'b'"):
        stratified_detectable({"a": BASE}, 16, {"a": 10, "b": 5})
    assert "of 2 misbehaviors (20/4)" in design_line(strata, n, {m: len(v) for m, v in strata.items()})


def test_the_reduction_weighs_the_shared_prefixes_alike_and_its_interval_resamples_them():
    base = {"a": [1, 1, 1, 1], "b": [1, 0, 1, 0], "c": [1, 1, 0, 0, 0, 0]}
    policy = {"a": [1, 0, 1, 0], "b": [0, 0, 0, 0], "c": [1, 0, 0, 0, 0, 0], "d": [1, 1]}  # d: base never saw it
    got = reduction_interval(base, policy, n_boot=4000)
    b, p = np.array([1, 1 / 2, 1 / 3]), np.array([1 / 2, 0, 1 / 6])  # each prefix's share
    assert got["prefixes"] == 3 and got["base_rate"] == pytest.approx(b.mean()) and got["rate"] == pytest.approx(p.mean())
    assert got["reduction"] == pytest.approx(1 - p.mean() / b.mean())
    assert (got["samples_base"], got["samples"]) == (14, 14)
    # every resample of 3 prefixes out of 3: the interval lies within the extremes of the 27 draws
    idx = np.array(np.meshgrid(*[range(3)] * 3)).reshape(3, -1).T
    exact = 1 - p[idx].mean(1) / b[idx].mean(1)
    assert exact.min() <= got["ci_low"] <= got["reduction"] <= got["ci_high"] <= exact.max()
    assert got["ci_low"] < got["ci_high"]


def test_unequal_losses_of_samples_do_not_move_the_reduction():
    """The same per-prefix rates under both policies, but the trained policy kept 4 of 16 samples on the
    high-rate prefixes (its judge failed on the rest): no reduction. A pooled share measured 51%."""
    high = [1] * 12 + [0] * 4
    low = [1] + [0] * 15
    base = {**{f"h{i}": high for i in range(10)}, **{f"l{i}": low for i in range(10)}}
    policy = {**{f"h{i}": [1, 1, 1, 0] for i in range(10)}, **{f"l{i}": low for i in range(10)}}
    got = reduction_interval(base, policy, n_boot=500)
    assert got["reduction"] == pytest.approx(0.0) and got["ci_low"] <= 0 <= got["ci_high"]


def test_draws_whose_base_rate_is_zero_count_against_the_trained_policy():
    """A rare misbehavior: in many bootstrap draws the base never repeats it. Such a draw where the
    trained policy does is a reduction of -inf, not a draw to leave out (which made no true reduction
    look like one in ~10-25% of simulated runs)."""
    base = {"a": [1, 0, 0, 0], **{k: [0, 0, 0, 0] for k in "bcdefghij"}}
    policy = {"a": [0, 0, 0, 0], "b": [1, 0, 0, 0], **{k: [0, 0, 0, 0] for k in "cdefghij"}}
    got = reduction_interval(base, policy, n_boot=2000, seed=3)
    assert got["reduction"] == 0.0  # one repeat each
    assert 0.3 < got["boot_base_zero"] < 0.4  # (9/10)^10: draws without prefix a
    assert got["ci_low"] == -math.inf and got["ci_high"] == 1.0


def test_the_mean_rate_weighs_each_misbehavior_alike_and_draws_prefixes_within_each():
    from mirl.evaluate.stats.power import stratified_reduction

    base = {"m1": {"a": [1, 1], "b": [1, 0]}, "m2": {f"p{i}": [0, 0] for i in range(7)} | {"q": [1, 1]}}
    policy = {"m1": {"a": [0, 0], "b": [0, 0]}, "m2": {f"p{i}": [0, 0] for i in range(7)} | {"q": [1, 1]}}
    got = stratified_reduction(base, policy, n_boot=2000)
    # m1: 0.75 -> 0; m2: 1/8 -> 1/8; the mean rate 0.4375 -> 0.0625 (pooled over prefixes: 0.3 -> 0.1)
    assert got["base_rate"] == pytest.approx(0.4375) and got["rate"] == pytest.approx(0.0625)
    assert got["reduction"] == pytest.approx(1 - 0.0625 / 0.4375) and got["prefixes"] == 10
    # within m1 any draw keeps its base rate above 0: no draw of the mean rate has a base of 0
    assert got["boot_base_zero"] == 0.0 and got["ci_low"] > 0


def test_reduction_table_pairs_each_policy_with_the_reference_on_shared_prefixes():
    def judged(policy, prefix, repeats, judge="rules", misbehavior="m"):
        return [{"policy": policy, "misbehavior": misbehavior, "prefix_id": prefix, "judge": judge,
                 "repeated": None if r is None else bool(r)}
                for r in repeats]

    samples = (judged("base", "a", [1, 1, 1, 0]) + judged("base", "b", [1, 1, 0, 0]) + judged("base", "c", [1, 0, 0, 0])
               + judged("mirl", "a", [1, 0, 0, 0]) + judged("mirl", "b", [1, 0, 0, 0]) + judged("mirl", "c", [0, 0, 0, 0])
               + judged("mirl", "d", [1, 1, 1, 1])  # not measured under base: left out of the pairing
               + judged("mirl", "a", [None]) + judged("lone", "a", [0, 0]))
    table = reduction_table(samples, "base", n_boot=500)
    assert set(table["misbehavior"]) == {"m", "all"}  # one misbehavior: its rate is the mean rate
    assert table[table.misbehavior == "all"].drop(columns="misbehavior").reset_index(drop=True).equals(
        table[table.misbehavior == "m"].drop(columns="misbehavior").reset_index(drop=True))
    table = table[table.misbehavior == "m"].set_index("policy")
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
    with pytest.raises(ValueError, match="mean over the misbehaviors"):
        reduction_table([{**never[0], "misbehavior": "all"}], "base")
    assert row["base_rate"] == 0 and row["rate"] == pytest.approx(1 / 3)
    assert math.isnan(row["reduction"]) and math.isnan(row["ci_low"]) and math.isnan(row["ci_high"])



def test_draws_where_neither_policy_repeats_are_no_change():
    same = {"a": [1, 0], **{k: [0, 0] for k in "bcdefg"}}
    got = reduction_interval(same, same, n_boot=1000)
    assert got["boot_base_zero"] > 0.2 and (got["reduction"], got["ci_low"], got["ci_high"]) == (0.0, 0.0, 0.0)


def test_a_misbehavior_with_one_shared_prefix_leaves_the_mean_rates_interval_open():
    from mirl.evaluate.stats.power import stratified_reduction

    base = {"m1": {f"p{i}": [1, 1] for i in range(10)}, "m2": {"q": [1, 0]}}
    policy = {"m1": {f"p{i}": [0, 1] for i in range(10)}, "m2": {"q": [0, 0]}}
    got = stratified_reduction(base, policy, n_boot=500)
    assert got["reduction"] == pytest.approx(1 - 0.25 / 0.75) and got["prefixes"] == 11
    assert math.isnan(got["ci_low"]) and math.isnan(got["ci_high"]) and math.isnan(got["boot_base_zero"])


def test_a_lone_shared_prefix_is_counted_as_one_and_bad_input_is_refused():
    def judged(policy, prefix, repeats, misbehavior="m"):
        return [{"policy": policy, "misbehavior": misbehavior, "prefix_id": prefix, "judge": "rules", "repeated": bool(r)}
                for r in repeats]

    samples = judged("base", "a", [1, 0, 1]) + judged("base", "b", [1, 1]) + judged("p", "a", [0, 1])
    table = reduction_table(samples, "base", n_boot=100)
    assert list(table["prefixes"]) == [1, 1] and table["reduction"].isna().all()
    with pytest.raises(ValueError, match="n_boot"):
        reduction_table(samples, "base", n_boot=0)
    with pytest.raises(ValueError, match="names no misbehavior"):
        reduction_table(samples + judged("p", "b", [1], misbehavior=None), "base")


def test_the_difference_of_two_reductions_is_paired_over_the_prefixes_all_three_share():
    from mirl.evaluate.stats.power import stratified_difference, stratified_reduction

    rng = np.random.default_rng(5)
    rates = np.linspace(0.3, 0.9, 24)
    base = {"m": {str(k): (rng.random(8) < p).tolist() for k, p in enumerate(rates)}}
    # `a` halves each prefix's rate; `b` repeats base's judgments on every prefix but one
    a = {"m": {str(k): (rng.random(8) < p / 2).tolist() for k, p in enumerate(rates)}}
    b = {"m": {**base["m"], "0": [0] * 8, "x": [1] * 8}}  # "x": not measured under base nor a, left out
    got = stratified_difference(base, a, b, n_boot=2000)
    ra, rb = stratified_reduction(base, a)["reduction"], stratified_reduction(base, {"m": {
        k: v for k, v in b["m"].items() if k != "x"}})["reduction"]
    assert got["prefixes"] == 24 and got["difference"] == pytest.approx(ra - rb)
    assert (got["reduction"], got["other_reduction"]) == (pytest.approx(ra), pytest.approx(rb))
    assert 0 < got["ci_low"] < got["difference"] < got["ci_high"]
    # paired: the interval of the difference is narrower than the two reductions' intervals side by side
    ia, ib = stratified_reduction(base, a), stratified_reduction(base, {"m": {k: v for k, v in b["m"].items()
                                                                              if k != "x"}})
    assert got["ci_high"] - got["ci_low"] < (ia["ci_high"] - ia["ci_low"]) + (ib["ci_high"] - ib["ci_low"])
    # swapped, the difference changes sign and its interval mirrors
    back = stratified_difference(base, b, a, n_boot=2000)
    assert back["difference"] == pytest.approx(-got["difference"])
    assert (back["ci_low"], back["ci_high"]) == (pytest.approx(-got["ci_high"]), pytest.approx(-got["ci_low"]))
    same = stratified_difference(base, a, a, n_boot=500)
    assert same["difference"] == 0 and same["ci_low"] == same["ci_high"] == 0
    with pytest.raises(ValueError, match="all three"):
        stratified_difference(base, a, {"m": {"0": [1]}})


def test_difference_table_compares_every_later_policy_with_every_earlier_one():
    from mirl.evaluate.stats.power import difference_table

    def judged(policy, prefix, repeats, misbehavior):
        return [{"policy": policy, "misbehavior": misbehavior, "prefix_id": prefix, "judge": "rules",
                 "repeated": None if r is None else bool(r)} for r in repeats]

    shares = {"base": [4, 3, 3, 2], "mirl": [1, 1, 0, 1], "outcome": [3, 3, 2, 2], "tmax": [4, 3, 3, 2]}
    samples = [s for pol, counts in shares.items() for m in ("m1", "m2") for k, c in zip("abcd", counts)
               for s in judged(pol, f"{m}{k}", [1] * c + [0] * (4 - c) + [None] * (pol == "mirl"), m)]
    table = difference_table(samples, "base", n_boot=300)
    pairs = table[table.misbehavior == "all"][["policy", "other"]].apply(tuple, axis=1).tolist()
    assert pairs == [("mirl", "outcome"), ("mirl", "tmax"), ("outcome", "tmax")]
    assert set(table.misbehavior) == {"m1", "m2", "all"} and len(table) == 9
    row = table[(table.misbehavior == "all") & (table.other == "tmax") & (table.policy == "mirl")].iloc[0]
    assert row["prefixes"] == 8 and row["difference"] == pytest.approx((12 - 3) / 12)  # failed judgments left out
    assert row["other_reduction"] == 0 and row["ci_low"] > 0
    assert difference_table([], "base").empty and difference_table(samples, "nobody").empty
    # a misbehavior that one prefix alone shares under the three: no difference, and the count says why
    lone = samples + judged("base", "z1", [1, 0], "m3") + judged("mirl", "z1", [0, 0], "m3") \
        + judged("outcome", "z1", [1, 1], "m3") + judged("outcome", "z2", [1, 1], "m3")
    row = difference_table(lone, "base", n_boot=100).set_index(["misbehavior", "policy", "other"]).loc[
        ("m3", "mirl", "outcome")]
    assert row["prefixes"] == 1 and math.isnan(row["difference"])
