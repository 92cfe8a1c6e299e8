"""The policy on a GPU, in-process: a vLLM engine when vLLM is installed, transformers otherwise.

Both engines share one interface with the embedded model (`generate(messages, sample_indices,
max_tokens, temperature, top_p, seed, stop) -> Generation`), so they can be

- used directly as a `Model` (`engine.complete(messages, n=4)`), or
- served through the client, with cache and ledger: `embedded.serve("policy", engine)` makes the
  litellm model `local/policy` answer from it; then set `llm.policy.model: local/policy`.

vLLM runs with prefix caching on, because group rollouts share long prefixes. Each sample is its
own request with seed (seed, sample index), all submitted at once so vLLM batches them: a given
(seed, index) reproduces whatever else is in the batch.

To use a separate vLLM server instead (several GPUs, or a shared server), skip this module and point
the role at it in params YAML: `policy: {model: hosted_vllm/<served-name>, api_base: http://host:8000/v1}`.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path
from typing import Any

from mirl.llm.embedded import EmbeddedLM, Generation, Sample, generation_to_completions, row_seed


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


class VLLMEngine:
    """A `vllm.LLM` behind the embedded-model interface."""

    def __init__(self, model: str | Path, gpu_memory_utilization: float = 0.85, max_model_len: int | None = None,
                 dtype: str = "auto", tensor_parallel_size: int = 1, **engine_kwargs: Any):
        if not vllm_available():
            raise ImportError("vLLM is not installed: pip install 'mirl[gpu]' (or use TransformersEngine)")
        from vllm import LLM

        t0 = time.perf_counter()
        self.llm = LLM(model=str(model), enable_prefix_caching=True, gpu_memory_utilization=gpu_memory_utilization,
                       max_model_len=max_model_len, dtype=dtype, tensor_parallel_size=tensor_parallel_size,
                       **engine_kwargs)
        self.load_seconds = time.perf_counter() - t0
        self.name = Path(str(model)).name
        self._lock = threading.Lock()

    def generate(self, messages: list[dict[str, Any]], sample_indices: list[int], max_tokens: int = 256,
                 temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
                 stop: str | list[str] | None = None) -> Generation:
        from vllm import SamplingParams

        params = [SamplingParams(n=1, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                                 seed=row_seed(seed, i), stop=stop) for i in sample_indices]
        t0 = time.perf_counter()
        with self._lock:
            outs = self.llm.chat([messages] * len(sample_indices), sampling_params=params, use_tqdm=False)
        samples = [Sample(text=o.outputs[0].text, output_tokens=len(o.outputs[0].token_ids),
                          finish_reason=str(o.outputs[0].finish_reason or "stop")) for o in outs]
        prompt_tokens = len(outs[0].prompt_token_ids) if outs else 0
        return Generation(samples=samples, prompt_tokens=prompt_tokens, seconds=time.perf_counter() - t0)

    def complete(self, messages: list[dict[str, Any]], n: int = 1, **kwargs: Any):
        return generation_to_completions(self, messages, n, **kwargs)


class TransformersEngine(EmbeddedLM):
    """A Hugging Face checkpoint directory run by transformers (the GPU when present), bf16 on GPU."""

    def __init__(self, model_dir: str | Path, device: str | None = None, dtype: str | None = None):
        import torch

        on_gpu = (device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
        super().__init__(model_dir, device=device, dtype=dtype or ("bfloat16" if on_gpu else None))


def policy_engine(model: str | Path, backend: str = "auto", **kwargs: Any):
    """vLLM when `backend` is "vllm", or "auto" and vLLM is installed; transformers otherwise."""
    if backend not in ("auto", "vllm", "transformers"):
        raise ValueError(f"backend must be auto, vllm or transformers, got {backend!r}")
    if backend == "vllm" or (backend == "auto" and vllm_available()):
        return VLLMEngine(model, **kwargs)
    return TransformersEngine(model, **{k: v for k, v in kwargs.items() if k in ("device", "dtype")})
