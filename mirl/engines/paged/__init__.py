"""Continuous batching with paged KV: one GPU decodes every in-flight request in one step.

`PagedEngine` (engine.py) is the engine; `pages.py` the KV pages and prefix cache; `model.py` the
Llama-family forward over pages; `attention.py` and `kernels.py` the attention (Triton on a GPU,
the torch reference on a CPU); `sampler.py` the per-row hashed Gumbel-max sampler.
"""

from mirl.engines.paged.engine import PagedEngine

__all__ = ["PagedEngine"]
