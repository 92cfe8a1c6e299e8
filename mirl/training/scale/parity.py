"""Does the ZeRO learner take the single-process learner's step? Loss, gradients and weights after one
step on the same batch, from each side, and their largest differences.

`zero_result` runs on every rank of a group (the test spawns two CPU processes on gloo;
benchmarks/gpu/zero_check.py runs it under torchrun on GPUs); `reference_result` is the embedded
`Learner` in one process; `differences` compares them. Gradients are compared after clipping (the
coefficient max_norm / (norm + 1e-6), capped at 1, is the same formula in torch and DeepSpeed), but
the ZeRO side's are read raw and clipped here, so they cannot show DeepSpeed's own clipping. The
update (weights after minus before, relative to the reference's largest) can, where the optimizer's
step grows with the gradient: AdamW's first step is about lr * sign(g) whatever the scale, so the
check runs it with an eps far above |g| as well (lr * g / (|g| + eps), about lr * g / eps).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from mirl.training.learner import Example, Learner, LearnerConfig


def _clip_coef(norm: float, max_norm: float) -> float:
    return min(1.0, max_norm / (norm + 1e-6))


def reference_result(model: Any, config: LearnerConfig, examples: Sequence[Example],
                     advantages: Sequence[float]) -> dict[str, Any]:
    """One step of the embedded learner on a copy of `model`: stats, clipped gradients, new weights."""
    model = copy.deepcopy(model)
    before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
    learner = Learner(model, config)
    grads: dict[str, torch.Tensor] = {}
    real_step = learner.optimizer.step

    def step(*args, **kwargs):  # the gradients as the optimizer sees them (after clipping)
        grads.update({n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None})
        return real_step(*args, **kwargs)

    learner.optimizer.step = step
    stats = learner.train_step(examples, advantages)
    weights = {n: p.detach().float().clone() for n, p in model.named_parameters()}
    return {"stats": stats, "grads": grads, "weights": weights, "before": before}


def zero_result(learner: Any, examples: Sequence[Example], advantages: Sequence[float]) -> dict[str, Any]:
    """One step of a `ZeroLearner` (call on every rank): stats, full clipped gradients, new weights."""
    import time

    from deepspeed.utils import safe_get_full_grad

    t0 = time.perf_counter()
    stats = learner.backward(examples, advantages)
    raw = {}
    for name, p in learner.model.named_parameters():
        g = safe_get_full_grad(p)  # a collective under ZeRO-3: every rank asks for every tensor
        if g is not None:
            raw[name] = g.detach().float().cpu().clone()
    stats = learner.step(stats, t0)
    coef = _clip_coef(stats["grad_norm"], learner.config.max_grad_norm)
    weights = {n: w.float().cpu() for n, w in learner.named_weights()}
    return {"stats": stats, "grads": {n: g * coef for n, g in raw.items()}, "weights": weights}


def differences(ref: dict[str, Any], got: dict[str, Any], lr: float) -> dict[str, float]:
    """Largest differences: loss and grad norm (relative), gradients (relative to the largest
    reference gradient), weights after the step (in units of `lr`, about the size of AdamW's first
    step, which maps a gradient's rounding to up to a step where it is near eps) and the update
    (relative to the reference's largest, where the reference holds the weights before); missing
    tensors are an error."""
    out = {}
    for key in ("loss", "grad_norm", "entropy"):
        a, b = float(ref["stats"][key]), float(got["stats"][key])
        out[key] = abs(a - b) / max(abs(a), 1e-12)
    for part in ("grads", "weights"):
        missing = sorted(set(ref[part]) ^ set(got[part]))
        if missing:
            raise KeyError(f"{part}: tensors on one side only: {missing[:5]}")
    scale = max(float(g.abs().max()) for g in ref["grads"].values())
    out["grads"] = max(float((ref["grads"][n] - got["grads"][n].to(ref["grads"][n].device)).abs().max())
                       for n in ref["grads"]) / scale
    out["weights"] = max(float((ref["weights"][n] - got["weights"][n].to(ref["weights"][n].device)).abs().max())
                         for n in ref["weights"]) / lr
    if "before" in ref:
        largest = max(float((ref["weights"][n] - ref["before"][n]).abs().max()) for n in ref["weights"])
        out["update"] = max(float((ref["weights"][n] - got["weights"][n].to(ref["weights"][n].device)).abs().max())
                            for n in ref["weights"]) / max(largest, 1e-30)
    return out
