"""DPPO and clipped losses: mask, value and gradient against float64 references written here from
the definitions, token by token in plain Python (no torch in the reference)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from mirl.training.loss import clipped_loss, dppo_loss, dppo_mask


def random_batch(seed: int, batch: int = 4, tokens: int = 9, dtype=torch.float64):
    """Sampler probabilities in (0.02, 1), learner ones moved by up to about +-0.4 in probability
    (so tokens land on both sides of delta), advantages of both signs (and some 0), a ragged mask."""
    rng = random.Random(seed)
    mu = [[rng.uniform(0.02, 0.98) for _ in range(tokens)] for _ in range(batch)]
    pi = [[min(0.999, max(0.001, m + rng.uniform(-0.4, 0.4))) for m in row] for row in mu]
    adv = [rng.choice([-1.5, -0.5, 0.0, 0.25, 1.0]) * rng.uniform(0.5, 1.5) for _ in range(batch)]
    mask = [[1] * rng.randint(3, tokens) for _ in range(batch)]
    mask = [row + [0] * (tokens - len(row)) for row in mask]
    lp = torch.tensor([[math.log(p) for p in row] for row in pi], dtype=dtype, requires_grad=True)
    lmu = torch.tensor([[math.log(m) for m in row] for row in mu], dtype=dtype)
    return lp, lmu, torch.tensor(adv, dtype=dtype), torch.tensor(mask, dtype=torch.bool)


def to_lists(lp, lmu, adv, mask):
    adv = adv.tolist()
    return lp.detach().double().tolist(), lmu.double().tolist(), adv, mask.tolist()


def ref_dppo(lp, lmu, adv, mask, delta):
    """Loss, d loss / d log pi, kept flags and masked share, from the definition."""
    n = sum(sum(row) for row in mask)
    loss, grad, keep, masked = 0.0, [], [], 0
    for b, row in enumerate(lp):
        grad.append([]), keep.append([])
        for t, logpi in enumerate(row):
            if not mask[b][t]:
                grad[b].append(0.0), keep[b].append(False)
                continue
            a, pi, mu = adv[b], math.exp(logpi), math.exp(lmu[b][t])
            r = pi / mu
            away = (a > 0 and r > 1) or (a < 0 and r < 1)
            k = not (abs(pi - mu) > delta and away)
            masked += not k
            keep[b].append(k)
            loss += -a * r / n if k else 0.0
            grad[b].append(-a * r / n if k else 0.0)  # d(-a * exp(logpi - logmu)) / d logpi
    return loss, grad, keep, masked / n


def ref_clipped(lp, lmu, adv, mask, lo, hi):
    n = sum(sum(row) for row in mask)
    loss, grad, clipped = 0.0, [], 0
    for b, row in enumerate(lp):
        grad.append([])
        for t, logpi in enumerate(row):
            if not mask[b][t]:
                grad[b].append(0.0)
                continue
            a, r = adv[b], math.exp(logpi - lmu[b][t])
            plain, clip = -a * r, -a * min(max(r, 1 - lo), 1 + hi)
            loss += max(plain, clip) / n
            # the clipped term, when it is the larger, is constant in r: no gradient
            grad[b].append(-a * r / n if plain >= clip else 0.0)
            clipped += clip > plain
    return loss, grad, clipped / n


SEEDS = range(8)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("delta", [0.1, 0.15, 0.3])
def test_dppo_value_gradient_and_mask_match_the_reference(seed, delta):
    lp, lmu, adv, mask = random_batch(seed)
    loss, stats = dppo_loss(lp, lmu, adv, mask, delta=delta)
    loss.backward()
    want_loss, want_grad, want_keep, want_share = ref_dppo(*to_lists(lp, lmu, adv, mask), delta)
    assert loss.item() == pytest.approx(want_loss, rel=1e-12, abs=1e-12)
    assert lp.grad.tolist() == [pytest.approx(row, rel=1e-12, abs=1e-12) for row in want_grad]
    assert (dppo_mask(lp.detach(), lmu, adv[:, None].expand_as(lp), delta) & mask).tolist() == want_keep
    assert stats["masked_share"] == pytest.approx(want_share)


def test_the_random_batches_cover_every_case():
    """Across the seeds, tokens are masked and kept on each side of delta with both advantage signs."""
    seen = set()
    for seed in SEEDS:
        lp, lmu, adv, mask = random_batch(seed)
        lp, lmu, adv, mask = to_lists(lp, lmu, adv, mask)
        _, _, keep, _ = ref_dppo(lp, lmu, adv, mask, 0.15)
        for b, row in enumerate(lp):
            for t, x in enumerate(row):
                if mask[b][t] and adv[b] != 0:
                    outside = abs(math.exp(x) - math.exp(lmu[b][t])) > 0.15
                    seen.add((adv[b] > 0, x > lmu[b][t], outside, keep[b][t]))
    assert {(True, True, True, False), (False, False, True, False), (True, False, True, True),
            (False, True, True, True), (True, True, False, True), (False, False, False, True)} <= seen


def test_dppo_hand_cases():
    """mu = 0.5 everywhere; pi 0.7 and 0.3 are 0.2 away (outside delta 0.15), 0.6 is inside."""
    pi = [0.7, 0.3, 0.6, 0.4]
    lp = torch.tensor([[math.log(p) for p in pi]] * 2, dtype=torch.float64, requires_grad=True)
    lmu = torch.full((2, 4), math.log(0.5), dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(2, 4, dtype=torch.bool)
    loss, stats = dppo_loss(lp, lmu, adv, mask, delta=0.15)
    # A > 0: pi 0.7 masked (r > 1, outside); 0.3 kept (moves back); 0.6, 0.4 inside.
    # A < 0: pi 0.3 masked (r < 1, outside); 0.7 kept; 0.6, 0.4 inside.
    r = [p / 0.5 for p in pi]
    want = (-(r[1] + r[2] + r[3]) + (r[0] + r[2] + r[3])) / 8
    assert loss.item() == pytest.approx(want)
    loss.backward()
    assert lp.grad[0].tolist() == pytest.approx([0.0, -r[1] / 8, -r[2] / 8, -r[3] / 8])
    assert lp.grad[1].tolist() == pytest.approx([r[0] / 8, 0.0, r[2] / 8, r[3] / 8])
    assert stats["masked_share"] == pytest.approx(2 / 8)
    assert stats["prob_abs_diff_mean"] == pytest.approx((0.2 + 0.2 + 0.1 + 0.1) * 2 / 8)
    logr = [math.log(x) for x in r]
    assert stats["logprob_diff_mean"] == pytest.approx(sum(logr) / 4)
    assert stats["logprob_abs_diff_mean"] == pytest.approx(sum(abs(x) for x in logr) / 4)


def test_dppo_at_identical_weights_is_the_plain_policy_gradient():
    lp, _, adv, mask = random_batch(3)
    loss, stats = dppo_loss(lp, lp.detach().clone(), adv, mask)
    loss.backward()
    n = mask.sum().item()
    assert lp.grad.tolist() == [pytest.approx(row) for row in (-adv[:, None] * mask / n).tolist()]
    assert stats["masked_share"] == 0 and stats["logprob_diff_mean"] == 0 and stats["prob_abs_diff_mean"] == 0


def test_token_advantages_and_sequence_advantages_agree():
    lp, lmu, adv, mask = random_batch(5)
    a, _ = dppo_loss(lp, lmu, adv, mask)
    b, _ = dppo_loss(lp, lmu, adv[:, None].expand_as(lp).clone(), mask)
    assert a.item() == pytest.approx(b.item(), rel=1e-12)


def test_float32_matches_the_float64_reference():
    lp, lmu, adv, mask = random_batch(6, dtype=torch.float32)
    loss, _ = dppo_loss(lp, lmu, adv, mask)
    loss.backward()
    want_loss, want_grad, _, _ = ref_dppo(*to_lists(lp, lmu, adv, mask), 0.15)
    assert loss.item() == pytest.approx(want_loss, rel=1e-5, abs=1e-6)
    assert lp.grad.tolist() == [pytest.approx(row, rel=1e-5, abs=1e-6) for row in want_grad]


@pytest.mark.parametrize("loss_fn", [dppo_loss, clipped_loss])
def test_padding_reaches_neither_value_nor_gradient(loss_fn):
    lp, lmu, adv, mask = random_batch(2)
    clean, _ = loss_fn(lp, lmu, adv, mask)
    dirty_lp = torch.where(mask, lp.detach(), torch.full_like(lp, float("nan"))).requires_grad_(True)
    dirty_mu = torch.where(mask, lmu, torch.full_like(lmu, float("inf")))
    dirty, _ = loss_fn(dirty_lp, dirty_mu, adv, mask)
    dirty.backward()
    assert dirty.item() == pytest.approx(clean.item(), rel=1e-12)
    assert torch.all(dirty_lp.grad[~mask] == 0) and torch.isfinite(dirty_lp.grad).all()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("eps", [(0.2, 0.28), (0.1, 0.1)])
def test_clipped_value_and_gradient_match_the_reference(seed, eps):
    lp, lmu, adv, mask = random_batch(seed)
    loss, stats = clipped_loss(lp, lmu, adv, mask, eps_low=eps[0], eps_high=eps[1])
    loss.backward()
    want_loss, want_grad, want_share = ref_clipped(*to_lists(lp, lmu, adv, mask), *eps)
    assert loss.item() == pytest.approx(want_loss, rel=1e-12, abs=1e-12)
    assert lp.grad.tolist() == [pytest.approx(row, rel=1e-12, abs=1e-12) for row in want_grad]
    assert stats["clipped_share"] == pytest.approx(want_share)


def test_clipped_hand_cases():
    """r = 1.5, 0.5, 1.1 with bounds [0.8, 1.28]: A > 0 takes the clipped 1.28 (no gradient) at 1.5
    and the plain r at 0.5 and 1.1; A < 0 takes the clipped 0.8 at 0.5 and the plain r at 1.5, 1.1."""
    r = [1.5, 0.5, 1.1]
    lp = torch.tensor([[math.log(x) for x in r]] * 2, dtype=torch.float64, requires_grad=True)
    lmu = torch.zeros(2, 3, dtype=torch.float64)
    loss, stats = clipped_loss(lp, lmu, torch.tensor([2.0, -1.0], dtype=torch.float64), torch.ones(2, 3, dtype=torch.bool))
    want = (-2 * (1.28 + 0.5 + 1.1) + (1.5 + 0.8 + 1.1)) / 6
    assert loss.item() == pytest.approx(want)
    loss.backward()
    assert lp.grad.tolist() == [pytest.approx([0.0, -2 * 0.5 / 6, -2 * 1.1 / 6]),
                                pytest.approx([1.5 / 6, 0.0, 1.1 / 6])]
    assert stats["clipped_share"] == pytest.approx(2 / 6)


def test_bad_shapes_are_named():
    lp, lmu, adv, mask = random_batch(0)
    with pytest.raises(ValueError, match="dppo_loss: sampler_logprobs has shape"):
        dppo_loss(lp, lmu[:, :3], adv, mask)
    with pytest.raises(ValueError, match="clipped_loss: advantages must be"):
        clipped_loss(lp, lmu, adv[:2], mask)
    with pytest.raises(ValueError, match="delta must be positive"):
        dppo_loss(lp, lmu, adv, mask, delta=0)
