"""The embedded learner: a torch copy of the policy that turns a batch of rollouts into one update.

A batch is a list of `Example`s (the ids the sampler saw, the loss mask of the tokens it sampled
after the prefix, their sampler logprobs) with one advantage each. `train_step` splits them into
micro-batches of at most `micro_batch_tokens` tokens: padded rows of similar length, or, where the
attention kernel separates sequences by their positions (flash-attention varlen on a GPU), one
packed row with positions restarting per sequence; either way no sequence attends to another
(both checked against one forward per sequence in the tests). The loss is the token-level mean over the whole
batch: each micro-batch's token sum is divided by the batch's count of loss tokens, and gradients
are accumulated before one optimizer step, so micro-batching does not change the update.

Only the positions that carry loss go through the LM head: the hidden states are gathered there
first, which keeps the logits tensor at [loss tokens, vocab] instead of [all tokens, vocab]. The
head then runs in chunks of `head_chunk` rows (`chunked_head_logprobs`): each chunk's logits are
reduced to a logprob and an entropy at once and recomputed in backward, so no [tokens, vocab]
tensor is kept for the backward pass (with a 152k vocabulary, 4k loss tokens' float32 logits and
softmax are ~5 GB). A padded micro-batch whose rows are all the same length passes no attention
mask, so SDPA runs its causal flash kernel instead of a masked one over an L x L mask. On a GPU each
decoder layer goes through `torch.compile` (one compiled graph serves every layer), which fuses the
pointwise work between the matrix products: at 8k tokens that took the Qwen3-1.7B step from 41% to
62% of the matmul ceiling (benchmarks/gpu/NOTES.md).
The learner's log-probability of a sampled token is `log_softmax(logits / T)` in float32 at the
sampling temperature T, exactly what the sampler stored (`mirl.engines.generator`), so at identical
weights the two agree up to kernel rounding; the step stats report that mismatch. Its size is set by
the precision: under bf16 autocast (`bf16`, a GPU's default) a token's logprob differs from a float32
sampler's by ~0.015 (SmolLM2, measured on the H200), in float32 by ~2e-6, so `EmbeddedEngine` runs its
learner in the precision of its sampler.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from mirl.engines.compile_lock import COMPILE_LOCK
from mirl.training.loss import clipped_loss, dppo_loss

log = logging.getLogger(__name__)


@dataclass
class Example:
    """One training sequence: ids, loss mask (1 on trained tokens) and the sampler's logprobs (0 elsewhere)."""

    ids: list[int]
    mask: list[int]
    logprobs: list[float]

    def __post_init__(self):
        if not (len(self.ids) == len(self.mask) == len(self.logprobs)):
            raise ValueError(f"example: {len(self.ids)} ids, {len(self.mask)} mask entries, {len(self.logprobs)} logprobs")

    @property
    def loss_tokens(self) -> int:
        return sum(1 for m in self.mask if m)


def pack(examples: Sequence[Example], max_tokens: int, padded: bool = True) -> list[list[int]]:
    """Indices of `examples` grouped into micro-batches of at most `max_tokens` tokens, by decreasing
    length. `padded`: a micro-batch costs rows x its longest sequence (rows of similar length go
    together); otherwise the sum of lengths (packed into one row). A sequence longer than
    `max_tokens` gets a micro-batch of its own."""
    order = sorted(range(len(examples)), key=lambda i: -len(examples[i].ids))
    bins: list[list[int]] = []
    for i in order:
        n = len(examples[i].ids)
        if bins:
            b = bins[-1]
            longest = len(examples[b[0]].ids)
            cost = longest * (len(b) + 1) if padded else sum(len(examples[j].ids) for j in b) + n
            if cost <= max_tokens:
                b.append(i)
                continue
        bins.append([i])
    return bins


def _targets(examples: Sequence[Example]) -> tuple[list[list[int]], list[list[int]], list[list[float]]]:
    """Per example: position t's target (the next id), its loss mask and sampler logprob; the last
    position predicts nothing."""
    return ([ex.ids[1:] + [0] for ex in examples], [ex.mask[1:] + [0] for ex in examples],
            [ex.logprobs[1:] + [0.0] for ex in examples])


def batch_inputs(examples: Sequence[Example], device: Any, packed: bool = False) -> dict[str, torch.Tensor]:
    """The model inputs of one micro-batch, and per position its target, loss mask, sampler logprob
    and sequence index.

    Padded (the default): one row per sequence, right-padded, with a padding attention mask, so each
    sequence attends only to itself. Packed: one row of sequences back to back with positions that
    restart per sequence and a block-diagonal causal mask [1, 1, L, L], so no sequence attends to
    another; flash-attention kernels take the same boundaries from the positions alone (varlen)."""
    targets, masks, mus = _targets(examples)
    if packed:
        ids = [t for ex in examples for t in ex.ids]
        seg = torch.tensor([s for s, ex in enumerate(examples) for _ in ex.ids], device=device)
        pos = torch.tensor([[p for ex in examples for p in range(len(ex.ids))]], device=device)
        causal = torch.ones(len(ids), len(ids), dtype=torch.bool, device=device).tril()
        attend = (causal & (seg[:, None] == seg[None, :]))[None, None]
        flat = {"target": [t for x in targets for t in x], "mask": [m for x in masks for m in x],
                "mu": [m for x in mus for m in x]}
        inputs = {"input_ids": torch.tensor([ids], device=device), "position_ids": pos, "attention_mask": attend}
    else:
        width = max(len(ex.ids) for ex in examples)
        pad = [width - len(ex.ids) for ex in examples]
        inputs = {"input_ids": torch.tensor([ex.ids + [0] * p for ex, p in zip(examples, pad)], device=device)}
        if any(pad):  # rows of one length need no mask: causal attention alone (the flash kernel)
            inputs["attention_mask"] = torch.tensor([[1] * len(ex.ids) + [0] * p for ex, p in zip(examples, pad)],
                                                    device=device)
        seg = torch.tensor([s for s, p in enumerate(pad) for _ in range(width)], device=device)
        flat = {"target": [t for x, p in zip(targets, pad) for t in x + [0] * p],
                "mask": [m for x, p in zip(masks, pad) for m in x + [0] * p],
                "mu": [m for x, p in zip(mus, pad) for m in x + [0.0] * p]}
    inputs.update(target=torch.tensor(flat["target"], device=device),
                  loss_mask=torch.tensor(flat["mask"], device=device, dtype=torch.bool),
                  sampler_logprobs=torch.tensor(flat["mu"], device=device, dtype=torch.float32), segment=seg)
    return inputs


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype autocast would run a matrix product in here (the tensor's own without autocast)."""
    dev = t.device.type
    if torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return t.dtype


class _ChunkedHead(torch.autograd.Function):
    """logprob and entropy of `target` under softmax(h @ W^T / T), `chunk` rows at a time; backward
    recomputes each chunk's logits, so only h, W and the log-normalizers are saved."""

    @staticmethod
    def forward(ctx, h, weight, target, temperature: float, chunk: int, dtype):
        hw, ww = h.to(dtype), weight.to(dtype)
        n = h.shape[0]
        lp = torch.empty(n, dtype=torch.float32, device=h.device)
        entropy, logz = torch.empty_like(lp), torch.empty_like(lp)
        for s in range(0, n, chunk):
            logits = (hw[s:s + chunk] @ ww.t()).float()
            if temperature > 0:
                logits = logits / temperature
            z = torch.logsumexp(logits, dim=-1)
            lp[s:s + chunk] = logits.gather(-1, target[s:s + chunk, None]).squeeze(-1) - z
            entropy[s:s + chunk] = z - (torch.softmax(logits, dim=-1) * logits).sum(-1)
            logz[s:s + chunk] = z
        ctx.save_for_backward(h, weight, target, logz)
        ctx.temperature, ctx.chunk, ctx.dtype = temperature, chunk, dtype
        ctx.mark_non_differentiable(entropy)
        return lp, entropy

    @staticmethod
    def backward(ctx, g_lp, _g_entropy):
        h, weight, target, logz = ctx.saved_tensors
        t, chunk = ctx.temperature, ctx.chunk
        hw, ww = h.to(ctx.dtype), weight.to(ctx.dtype)
        grad_h = torch.empty_like(h) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if ctx.needs_input_grad[1] else None
        for s in range(0, h.shape[0], chunk):
            logits = (hw[s:s + chunk] @ ww.t()).float()
            if t > 0:
                logits = logits / t
            g = g_lp[s:s + chunk, None].float()
            # d lp / d logits = onehot(target) - softmax, times the upstream gradient (and 1/T)
            grad = torch.exp(logits - logz[s:s + chunk, None]).mul_(-g)
            grad.scatter_add_(-1, target[s:s + chunk, None], g)
            if t > 0:
                grad = grad / t
            grad = grad.to(ctx.dtype)
            if grad_h is not None:
                grad_h[s:s + chunk] = (grad @ ww).to(h.dtype)
            if grad_w is not None:
                grad_w += (grad.t() @ hw[s:s + chunk]).float()
        return grad_h, (grad_w.to(weight.dtype) if grad_w is not None else None), None, None, None, None


def chunked_head_logprobs(h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, temperature: float = 1.0,
                          chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprob, entropy) of each `target` under `log_softmax(h @ weight^T / T)` in float32, the
    head's matrix products in the dtype autocast gives them; the same numbers and gradients as
    applying the head and `log_softmax` directly, with at most `chunk` rows of logits alive."""
    return _ChunkedHead.apply(h, weight, target, float(temperature), max(1, int(chunk)), _compute_dtype(h))


def token_logprobs(model: Any, inputs: dict[str, torch.Tensor], temperature: float = 1.0,
                   head_chunk: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprob, entropy) of each loss-mask target under `model`, in float32, from a forward pass
    over the micro-batch with the LM head applied only at those positions. `head_chunk` > 0 runs the
    head through `chunked_head_logprobs` (where it has no bias); 0 applies it in one piece."""
    body = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    kw = {k: inputs[k] for k in ("input_ids", "attention_mask", "position_ids") if k in inputs}
    hidden = body(**kw, use_cache=False).last_hidden_state
    h = hidden.reshape(-1, hidden.shape[-1])[inputs["loss_mask"]]
    head = model.get_output_embeddings()
    target = inputs["target"][inputs["loss_mask"]]
    # a ZeRO-3 partitioned weight (`ds_id`) is whole only inside its module's call: the head runs in one piece
    if head_chunk > 0 and getattr(head, "bias", None) is None and not hasattr(head.weight, "ds_id"):
        return chunked_head_logprobs(h, head.weight, target, temperature, head_chunk)
    logits = head(h).float()
    if temperature > 0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    lp = logits.gather(-1, target.view(-1, 1)).squeeze(-1) - logz
    with torch.no_grad():
        p = torch.softmax(logits, dim=-1)
        entropy = logz - (p * logits).sum(-1)
    return lp, entropy


def packs_natively(model: Any) -> bool:
    """Whether the model's attention separates packed sequences by their positions (flash varlen):
    then packing saves the padding; otherwise padded rows are cheaper than an L x L mask."""
    return str(getattr(model.config, "_attn_implementation", "")).startswith("flash")


@dataclass
class LearnerConfig:
    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8  # torch's default; the ZeRO parity check raises it so a step grows with |g|
    max_grad_norm: float = 1.0
    loss: str = "dppo"  # "dppo" | "clipped"
    delta: float = 0.15
    eps_low: float = 0.2
    eps_high: float = 0.28
    temperature: float = 1.0
    micro_batch_tokens: int = 4096
    gradient_checkpointing: bool = False
    head_chunk: int = 4096  # LM-head rows per chunk (chunked_head_logprobs); 0: the head in one piece
    compile_layers: bool | None = None  # torch.compile each decoder layer; None: on a GPU
    bf16: bool | None = None  # bf16 autocast of the forward and backward; None: on a GPU


STAT_SUMS = ("loss", "masked", "abs_diff", "diff", "entropy", "prob_gap")


def step_stats(sums: dict[str, float], total: int, grad_norm: float, micro_batches: int, seconds: float,
               tokens: int) -> dict[str, float]:
    """A step's stats from the token-weighted sums over its `total` loss tokens."""
    return dict(loss=sums["loss"] / total, masked_share=sums["masked"] / total,
                logprob_abs_diff=sums["abs_diff"] / total, logprob_diff=sums["diff"] / total,
                prob_abs_diff=sums["prob_gap"] / total, entropy=sums["entropy"] / total,
                grad_norm=grad_norm if math.isfinite(grad_norm) else float("nan"),
                micro_batches=micro_batches, learner_s=round(seconds, 4),
                learner_tokens_per_s=round(tokens / seconds, 1) if seconds > 0 else 0.0)


class Learner:
    """A trainable policy with AdamW; `train_step` is one optimizer step over one batch."""

    def __init__(self, model: Any, config: LearnerConfig | None = None):
        self.config = config or LearnerConfig()
        if self.config.loss not in ("dppo", "clipped"):
            raise ValueError(f"learner: loss must be 'dppo' or 'clipped', got {self.config.loss!r}")
        self.model = model
        self.device = next(model.parameters()).device
        model.train()
        if self.config.gradient_checkpointing and hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        for p in model.parameters():
            p.requires_grad_(True)
        c = self.config
        compile_layers = self.device.type == "cuda" if c.compile_layers is None else c.compile_layers
        self.compiled_layers = 0
        if compile_layers:  # fuses the norms, rotary embedding and activations between the matmuls
            body = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
            for layer in getattr(body, "layers", []):
                layer.compile()
                self.compiled_layers += 1
        # on a GPU the fused kernel: one pass over params, grads and moments instead of a loop of ops
        fused = {"fused": True} if self.device.type == "cuda" else {}
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=c.lr, betas=c.betas, weight_decay=c.weight_decay,
                                           eps=c.adam_eps, **fused)
        self.steps = 0

    def _autocast(self):
        """bf16 autocast (weights and optimizer stay float32) where `bf16` says so, by default on a GPU."""
        bf16 = self.device.type == "cuda" if self.config.bf16 is None else self.config.bf16
        if bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    def _loss(self, lp, mu, adv, mask):
        c = self.config
        lp, mu, adv, mask = lp[None], mu[None], adv[None], mask[None]
        if c.loss == "dppo":
            return dppo_loss(lp, mu, adv, mask, delta=c.delta)
        return clipped_loss(lp, mu, adv, mask, eps_low=c.eps_low, eps_high=c.eps_high)

    def micro_batches(self, examples: Sequence[Example]) -> list[list[int]]:
        """Indices of `examples` per micro-batch (padded rows, or packed where the kernel separates them)."""
        return pack(examples, self.config.micro_batch_tokens, padded=not packs_natively(self.model))

    def _logprobs(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return token_logprobs(self.model, inputs, self.config.temperature, self.config.head_chunk)

    def micro_loss(self, batch: Sequence[Example], advantages: Sequence[float], sums: dict[str, float]) -> torch.Tensor:
        """The token-mean policy loss of one micro-batch (with gradient); adds its token-weighted
        stats to `sums` (`STAT_SUMS`). The data-parallel learners call this same code."""
        n = sum(ex.loss_tokens for ex in batch)
        inputs = batch_inputs(batch, self.device, packed=packs_natively(self.model))
        with self._autocast():
            lp, entropy = self._logprobs(inputs)
        sel = inputs["loss_mask"]
        mu = inputs["sampler_logprobs"][sel]
        adv = torch.tensor(list(advantages), device=self.device, dtype=torch.float32)[inputs["segment"][sel]]
        loss, s = self._loss(lp, mu, adv, torch.ones_like(lp, dtype=torch.bool))
        sums["loss"] += float(loss.detach()) * n
        sums["masked"] += s.get("masked_share", s.get("clipped_share", 0.0)) * n
        sums["abs_diff"] += s["logprob_abs_diff_mean"] * n
        sums["diff"] += s["logprob_diff_mean"] * n
        sums["prob_gap"] += s["prob_abs_diff_mean"] * n
        sums["entropy"] += float(entropy.sum())
        return loss

    def train_step(self, examples: Sequence[Example], advantages: Sequence[float]) -> dict[str, float]:
        """One update: the batch's token-mean policy loss, gradients accumulated over micro-batches,
        clipped to `max_grad_norm`, one AdamW step. Returns the step's stats."""
        if len(examples) != len(advantages):
            raise ValueError(f"train_step: {len(examples)} examples but {len(advantages)} advantages")
        c = self.config
        t0 = time.perf_counter()
        total = sum(ex.loss_tokens for ex in examples)
        stats: dict[str, float] = {"sequences": len(examples), "loss_tokens": total,
                                   "tokens": sum(len(ex.ids) for ex in examples)}
        if total == 0:
            return {**stats, "skipped": 1, "learner_s": round(time.perf_counter() - t0, 4)}
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums = dict.fromkeys(STAT_SUMS, 0.0)
        micro = self.micro_batches(examples)
        # compiled layers may compile again in forward or backward: not while an engine in this process
        # compiles or captures a graph (mirl.engines.compile_lock)
        with COMPILE_LOCK if self.compiled_layers else nullcontext():
            for idx in micro:
                batch = [examples[i] for i in idx]
                n = sum(ex.loss_tokens for ex in batch)
                if n == 0:
                    continue
                loss = self.micro_loss(batch, [advantages[i] for i in idx], sums)
                (loss * (n / total)).backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        seconds = time.perf_counter() - t0
        stats.update(step_stats(sums, total, float(grad_norm), len(micro), seconds, stats["tokens"]))
        return stats

    def state_dict(self) -> dict[str, Any]:
        return {k: v.detach() for k, v in self.model.state_dict().items()}

    def save(self, directory: Any, tokenizer: Any = None) -> None:
        """Weights in Hugging Face format (loadable by `transformers` and the generators) plus the
        optimizer state for resuming."""
        from pathlib import Path

        from mirl.engines.weights import save_pretrained

        d = Path(directory)
        save_pretrained(self.model, tokenizer, d)
        torch.save({"optimizer": self.optimizer.state_dict(), "steps": self.steps}, d / "optimizer.pt")
        (d / "learner.json").write_text(json.dumps({"steps": self.steps}))  # kept when optimizer.pt goes

    def load(self, directory: Any) -> None:
        """Weights and optimizer state from a checkpoint written by `save`. A checkpoint that is no
        longer the newest has no optimizer state (`mirl.runner.inputs.RESUME_STATE`); from one,
        training goes on from its weights with a fresh optimizer, and says so."""
        from pathlib import Path

        from mirl.engines.weights import load_state

        d = Path(directory)
        state = load_state(d)
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected:
            raise KeyError(f"{d}: weights not in the policy: {sorted(unexpected)[:5]}")
        if not (d / "optimizer.pt").exists():
            self.optimizer.state.clear()
            info = d / "learner.json"  # the updates made (a training step without a live group makes none)
            self.steps = int(json.loads(info.read_text())["steps"]) if info.exists() else 0
            log.warning(
                "%s has no optimizer state (only the newest checkpoint keeps it): training goes on from its "
                "weights with a fresh optimizer", d)
            return
        opt = torch.load(d / "optimizer.pt", map_location=self.device, weights_only=False)
        self.optimizer.load_state_dict(opt["optimizer"])
        self.steps = int(opt["steps"])
