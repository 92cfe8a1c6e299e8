"""Policy losses on sampled tokens: DPPO (the default) and a GRPO/DAPO clipped surrogate to compare.

Both take, per sampled token, the learner's log-probability log pi (with gradient), the sampler's
log-probability log mu (the rollout's stored ``logprobs``; no gradient) and an advantage, on
``[batch, tokens]`` tensors; advantages may be ``[batch]`` (one per sequence, broadcast over its
tokens) or ``[batch, tokens]``. ``loss_mask`` selects the tokens the policy sampled (not prompt,
tool output or padding). Reduction is the token-level mean: the sum over the selected tokens divided
by their number, so long responses weigh by their length (DAPO's token-mean).

DPPO (Qi et al. 2026, arXiv 2602.04879, as used by TMax): with r = pi / mu, a token's gradient is
masked when it lies outside the trust region, |pi - mu| > delta, and the update would push it further
out (A > 0 and r > 1, or A < 0 and r < 1); updates that move r back towards 1 are always kept. The
rest get the importance-weighted policy gradient, surrogate -A * r, whose gradient is
-A * r * grad(log pi). A masked token adds 0 to the sum but still counts in the denominator, as in
the public implementations (TMax's open-instruct fork, ``open_instruct/grpo_utils.py``:
``compute_dppo_mask`` with the mask applied as a per-token weight over a response-token mean; SkyRL's
``dppo_policy_loss``; ``sail-sg/Stable-RL``'s verl ``core_algos.py``): masking removes a token's
push, it does not make the remaining tokens push harder.

The clipped loss is PPO's pessimistic surrogate max(-A * r, -A * clip(r, 1 - eps_low, 1 + eps_high))
with DAPO's decoupled bounds (clip-higher) and token-level mean, as in verl's ``compute_policy_loss``.

The stats each returns are for the step log: the share of selected tokens masked (or clipped), the
mean |pi - mu|, and the mean of log pi - log mu, which on the first micro-batch of a step (learner
and sampler at identical weights) measures the mismatch between the two engines' numerics.
"""

from __future__ import annotations

import torch


def _check(logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, advantages: torch.Tensor,
           loss_mask: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Shapes checked; advantages broadcast to tokens; log-probs outside the mask replaced by 0 so a
    sentinel or NaN at padding can reach neither the value nor the gradient."""
    if logprobs.dim() != 2:
        raise ValueError(f"{name}: logprobs must be [batch, tokens], got shape {tuple(logprobs.shape)}")
    for what, t in (("sampler_logprobs", sampler_logprobs), ("loss_mask", loss_mask)):
        if t.shape != logprobs.shape:
            raise ValueError(f"{name}: {what} has shape {tuple(t.shape)}, logprobs {tuple(logprobs.shape)}")
    if advantages.dim() == 1 and advantages.shape[0] == logprobs.shape[0]:
        advantages = advantages[:, None].expand_as(logprobs)
    elif advantages.shape != logprobs.shape:
        raise ValueError(f"{name}: advantages must be [batch] or [batch, tokens], got shape "
                         f"{tuple(advantages.shape)} for logprobs {tuple(logprobs.shape)}")
    mask = loss_mask.bool()
    lp = torch.where(mask, logprobs, torch.zeros_like(logprobs))
    mu = torch.where(mask, sampler_logprobs.detach(), torch.zeros_like(logprobs))
    adv = torch.where(mask, advantages.detach().to(logprobs.dtype), torch.zeros_like(logprobs))
    return lp, mu, adv


def _mismatch_stats(lp: torch.Tensor, mu: torch.Tensor, mask: torch.Tensor, n: torch.Tensor) -> dict[str, float]:
    with torch.no_grad():
        diff = (lp - mu) * mask
        prob_gap = (lp.exp() - mu.exp()).abs() * mask
        return {"tokens": int(n.item()),
                "prob_abs_diff_mean": float(prob_gap.sum() / n.clamp_min(1)),
                "logprob_diff_mean": float(diff.sum() / n.clamp_min(1)),
                "logprob_abs_diff_mean": float(diff.abs().sum() / n.clamp_min(1))}


def dppo_mask(logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, advantages: torch.Tensor,
              delta: float = 0.15) -> torch.Tensor:
    """True where DPPO keeps a token's gradient: inside |pi - mu| <= delta, or an update that moves
    r = pi / mu back towards 1. Inputs are same-shape tensors; no gradient flows through the mask."""
    with torch.no_grad():
        outside = (logprobs.exp() - sampler_logprobs.exp()).abs() > delta
        log_ratio = logprobs - sampler_logprobs
        away = ((advantages > 0) & (log_ratio > 0)) | ((advantages < 0) & (log_ratio < 0))
        return ~(outside & away)


def dppo_loss(logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, advantages: torch.Tensor,
              loss_mask: torch.Tensor, delta: float = 0.15) -> tuple[torch.Tensor, dict[str, float]]:
    """DPPO loss (token-level mean of -A * r over the loss-mask tokens, DPPO-masked ones adding 0)
    and its step stats: ``masked_share`` (of loss-mask tokens) plus the mismatch stats."""
    if not delta > 0:
        raise ValueError(f"dppo_loss: delta must be positive, got {delta}")
    lp, mu, adv = _check(logprobs, sampler_logprobs, advantages, loss_mask, "dppo_loss")
    mask = loss_mask.bool()
    keep = dppo_mask(lp, mu, adv, delta) & mask
    n = mask.sum()
    ratio = torch.exp(lp - mu)
    per_token = torch.where(keep, -adv * ratio, torch.zeros_like(ratio))
    loss = per_token.sum() / n.clamp_min(1)
    stats = {"masked_share": float((mask & ~keep).sum() / n.clamp_min(1)), **_mismatch_stats(lp, mu, mask, n)}
    return loss, stats


def clipped_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                 loss_mask: torch.Tensor, eps_low: float = 0.2, eps_high: float = 0.28
                 ) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO/DAPO clipped surrogate, token-level mean over the loss-mask tokens, and its step stats:
    ``clipped_share`` (tokens whose clipped term is the one taken, so they get no gradient) plus
    the mismatch stats. `old_logprobs` are the sampler's (or the pre-update learner's)."""
    if not (0 <= eps_low < 1 and eps_high >= 0):
        raise ValueError(f"clipped_loss: need 0 <= eps_low < 1 and eps_high >= 0, got {eps_low}, {eps_high}")
    lp, mu, adv = _check(logprobs, old_logprobs, advantages, loss_mask, "clipped_loss")
    mask = loss_mask.bool()
    n = mask.sum()
    ratio = torch.exp(lp - mu)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    per_token = torch.where(mask, torch.maximum(unclipped, clipped), torch.zeros_like(ratio))
    loss = per_token.sum() / n.clamp_min(1)
    with torch.no_grad():
        took_clip = (clipped > unclipped) & mask
    stats = {"clipped_share": float(took_clip.sum() / n.clamp_min(1)), **_mismatch_stats(lp, mu, mask, n)}
    return loss, stats
