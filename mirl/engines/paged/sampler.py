"""Sampling on the device, one row per sequence, each with its own settings and its own noise.

Gumbel-max: token = argmax(log_softmax(logits / T) + Gumbel noise), the noise a hash of (the row's
seed, the index of the token in its sample, the token id). A row's draws therefore depend on its
seed (seed, sample index) and on nothing else in the batch, and the step needs no host random state,
so it can live inside a CUDA graph. The stored logprob is `log_softmax(logits / T)[token]` in float32
before top-p (the contract of `mirl.engines.generator`); top-p removes the tokens outside the nucleus
before the argmax. A row with T <= 0 (stored as inverse temperature 0) is greedy: the argmax, its
logprob at T = 1.
"""

from __future__ import annotations

import math

import torch

M32 = 0xFFFFFFFF


def _mul32(a: torch.Tensor, c: int) -> torch.Tensor:
    """(a * c) mod 2^32 for int64 `a` in [0, 2^32) without overflowing int64."""
    lo, hi = c & 0xFFFF, c >> 16
    return (a * lo + (((a * hi) & 0xFFFF) << 16)) & M32


def hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mix (lowbias32) on int64 tensors holding values in [0, 2^32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def row_keys(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Per row a 32-bit key from its 63-bit seed and the index of the token it samples (int64 [rows])."""
    lo, hi = seeds & M32, (seeds >> 32) & M32
    return hash32(lo ^ hash32(hi ^ hash32((steps * 0x9E3779B1 + 0x632BE5AB) & M32)))


def token_hashes(vocab: int, device) -> torch.Tensor:
    return hash32(torch.arange(vocab, device=device, dtype=torch.long))


@torch.compiler.disable
def nucleus_scores(logp: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """`logp` with the tokens outside each row's nucleus set to -inf (rows with top_p >= 1 keep all).
    Left out of torch.compile: its sort and cumsum under dynamic shapes hit an Inductor code-generation
    error (torch 2.11, Triton backend); eager, they are a few kernels, captured by the graph as well."""
    sorted_p, order = logp.exp().sort(-1, descending=True)
    keep_sorted = (sorted_p.cumsum(-1) - sorted_p < top_p[:, None]) | (top_p[:, None] >= 1)  # keeps the top token
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return torch.where(keep, logp, torch.full_like(logp, -math.inf))


def sample(logits: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor, inv_temperature: torch.Tensor,
           top_p: torch.Tensor, token_hash: torch.Tensor, nucleus: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(token, logprob) per row of `logits` [rows, vocab]; per-row seeds, steps, inverse temperatures
    (0 = greedy) and top-p. `nucleus` False skips the top-p sort (every row has top_p >= 1)."""
    logits = logits.float()
    greedy = inv_temperature <= 0
    scale = torch.where(greedy, torch.ones_like(inv_temperature), inv_temperature)
    logp = torch.log_softmax(logits * scale[:, None], -1)
    score = nucleus_scores(logp, top_p) if nucleus else logp
    bits = hash32(token_hash[None, :] ^ row_keys(seeds, steps)[:, None]) >> 8
    u = (bits.float() + 0.5) * (1.0 / (1 << 24))
    drawn = (score - torch.log(-torch.log(u))).argmax(-1)
    tok = torch.where(greedy, logits.argmax(-1), drawn)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1)
