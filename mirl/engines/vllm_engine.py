"""The policy at scale, in-process: a `vllm.LLM` behind the engines' interface (vLLM installed).

It shares the interface of every engine here (`generate(messages, sample_indices, max_tokens,
temperature, top_p, seed, stop) -> Generation`), so it can be served through the client, with cache
and ledger: `registry.serve("policy", engine)` makes the litellm model `local/policy` answer from it;
then set `llm.policy.model: local/policy`.

vLLM runs with prefix caching on, because group rollouts share long prefixes. Each sample is its
own request with seed (seed, sample index), all submitted at once so vLLM batches them: a given
(seed, index) reproduces whatever else is in the batch.

It is a token-level generator too (`mirl.engines.generator`): `generate_tokens(prompt_ids, ...)`
and `update_weights(...)`. It sends `prompt_token_ids` and asks for the sampled token's logprob (`logprobs=0`) in
vLLM's `processed_logprobs` mode, i.e. after temperature: the same number as ours when top_p is 1
(with top_p < 1 vLLM reports the truncated, renormalized distribution's logprob instead).

To use a separate vLLM server instead (several GPUs, or a shared server), skip this module and point
the role at it in params YAML: `policy: {model: hosted_vllm/<served-name>, api_base: http://host:8000/v1}`.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path
from typing import Any

from mirl.engines.generator import Generation, Sample, TokenGeneration, TokenSample, check_prompt, row_seed
from mirl.engines.weights import end_ids


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


class VLLMEngine:
    """A `vllm.LLM` behind the embedded-model interface."""

    def __init__(self, model: str | Path, gpu_memory_utilization: float = 0.85, max_model_len: int | None = None,
                 dtype: str = "auto", tensor_parallel_size: int = 1, **engine_kwargs: Any):
        if not vllm_available():
            raise ImportError("vLLM is not installed: pip install 'mirl[gpu]' (or use the paged engine, mirl.engines.paged)")
        from vllm import LLM, SamplingParams

        t0 = time.perf_counter()
        engine_kwargs.setdefault("logprobs_mode", "processed_logprobs")  # after temperature (module docstring)
        llm = LLM(model=str(model), enable_prefix_caching=True, gpu_memory_utilization=gpu_memory_utilization,
                  max_model_len=max_model_len, dtype=dtype, tensor_parallel_size=tensor_parallel_size,
                  **engine_kwargs)
        self._attach(llm, SamplingParams, Path(str(model)).name)
        self.load_seconds = time.perf_counter() - t0

    def _attach(self, llm: Any, sampling_params: Any, name: str) -> None:
        """Wrap a built `vllm.LLM` (or a stand-in with its methods): what the engine needs of it."""
        self.llm, self._params, self.name = llm, sampling_params, name
        self.tokenizer = llm.get_tokenizer()
        self.end_ids = end_ids(self.tokenizer)
        self._lock = threading.Lock()

    def generate_tokens(self, prompt_ids, sample_indices, max_tokens: int = 256, temperature: float = 1.0,
                        top_p: float = 1.0, seed: int = 0, stop_ids=None) -> TokenGeneration:
        """The `Generator` interface: one request per sample (seed (seed, index)), all at once."""
        ids = check_prompt(prompt_ids)
        stops = {} if stop_ids is None else {"stop_token_ids": sorted(int(t) for t in stop_ids), "ignore_eos": True}
        params = [self._params(n=1, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                               seed=row_seed(seed, i), logprobs=0, **stops) for i in sample_indices]
        t0 = time.perf_counter()
        with self._lock:
            outs = self.llm.generate([{"prompt_token_ids": ids} for _ in sample_indices], sampling_params=params,
                                     use_tqdm=False)
        samples = []
        for o in outs:
            c = o.outputs[0]
            toks = [int(t) for t in c.token_ids]
            if c.logprobs is None or len(c.logprobs) != len(toks):
                raise RuntimeError(f"vLLM returned {len(c.logprobs or [])} logprobs for {len(toks)} tokens")
            # each position maps token id -> Logprob; the sampled token is always among them
            samples.append(TokenSample(ids=toks, logprobs=[float(pos[t].logprob) for pos, t in zip(c.logprobs, toks)],
                                       finish_reason=str(c.finish_reason or "length")))
        cached = min((int(getattr(o, "num_cached_tokens", 0) or 0) for o in outs), default=0)
        return TokenGeneration(samples=samples, prompt_tokens=len(ids), cached_tokens=cached,
                               seconds=time.perf_counter() - t0)

    def update_weights(self, weights: Any) -> None:
        """Load new weights into the model in every worker, then reset vLLM's prefix cache (its
        cached KV blocks were computed with the old weights). `weights`: a state dict, or
        (name, tensor) pairs. Workers in other processes need vLLM's
        VLLM_ALLOW_INSECURE_SERIALIZATION=1 for the function that loads them."""
        items = list(weights.items()) if hasattr(weights, "items") else list(weights)
        with self._lock:
            self.llm.apply_model(lambda model: model.load_weights(items))
            if self.llm.reset_prefix_cache() is False:
                raise RuntimeError("vLLM could not reset its prefix cache (requests still running?)")

    def generate(self, messages: list[dict[str, Any]], sample_indices: list[int], max_tokens: int = 256,
                 temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
                 stop: str | list[str] | None = None) -> Generation:
        params = [self._params(n=1, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                               seed=row_seed(seed, i), stop=stop) for i in sample_indices]
        t0 = time.perf_counter()
        with self._lock:
            outs = self.llm.chat([messages] * len(sample_indices), sampling_params=params, use_tqdm=False)
        samples = [Sample(text=o.outputs[0].text, output_tokens=len(o.outputs[0].token_ids),
                          finish_reason=str(o.outputs[0].finish_reason or "stop")) for o in outs]
        prompt_tokens = len(outs[0].prompt_token_ids) if outs else 0
        return Generation(samples=samples, prompt_tokens=prompt_tokens, seconds=time.perf_counter() - t0)

