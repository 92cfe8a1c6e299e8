"""The policy on a GPU, in-process: a vLLM engine when vLLM is installed, transformers otherwise.

Both engines share one interface with the embedded model (`generate(messages, sample_indices,
max_tokens, temperature, top_p, seed, stop) -> Generation`), so they can be

- used directly as a `Model` (`engine.complete(messages, n=4)`), or
- served through the client, with cache and ledger: `embedded.serve("policy", engine)` makes the
  litellm model `local/policy` answer from it; then set `llm.policy.model: local/policy`.

vLLM runs with prefix caching on, because group rollouts share long prefixes. Each sample is its
own request with seed (seed, sample index), all submitted at once so vLLM batches them: a given
(seed, index) reproduces whatever else is in the batch.

Both are token-level generators too (`mirl.llm.generator`): `generate_tokens(prompt_ids, ...)`
and `update_weights(...)`. The transformers engine is the embedded engine's code on the GPU. The
vLLM engine sends `prompt_token_ids` and asks for the sampled token's logprob (`logprobs=0`) in
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

from mirl.llm.embedded import EmbeddedLM, Generation, Sample, generation_to_completions, row_seed
from mirl.llm.generator import TokenGeneration, TokenSample, check_prompt


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


class VLLMEngine:
    """A `vllm.LLM` behind the embedded-model interface."""

    def __init__(self, model: str | Path, gpu_memory_utilization: float = 0.85, max_model_len: int | None = None,
                 dtype: str = "auto", tensor_parallel_size: int = 1, **engine_kwargs: Any):
        if not vllm_available():
            raise ImportError("vLLM is not installed: pip install 'mirl[gpu]' (or use TransformersEngine)")
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
        ends = {getattr(self.tokenizer, "eos_token_id", None), self.tokenizer.convert_tokens_to_ids("<|im_end|>")}
        unk = getattr(self.tokenizer, "unk_token_id", None)
        self.end_ids = {i for i in ends if isinstance(i, int) and i >= 0 and i != unk}
        self._lock = threading.Lock()

    def generate_tokens(self, prompt_ids, sample_indices, max_tokens: int = 256, temperature: float = 1.0,
                        top_p: float = 1.0, seed: int = 0) -> TokenGeneration:
        """The `Generator` interface: one request per sample (seed (seed, index)), all at once."""
        ids = check_prompt(prompt_ids)
        params = [self._params(n=1, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                               seed=row_seed(seed, i), logprobs=0) for i in sample_indices]
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

    def complete(self, messages: list[dict[str, Any]], n: int = 1, **kwargs: Any):
        return generation_to_completions(self, messages, n, **kwargs)


class TransformersEngine(EmbeddedLM):
    """A Hugging Face checkpoint directory run by transformers (the GPU when present), bf16 on GPU
    unless `dtype` says otherwise; the same prefix cache and token path as the embedded model.

    On a GPU, `generate_tokens` decodes the samples of a prompt with `mirl.llm.group_decode`
    (CUDA graphs over static KV buffers, the prompt's KV shared by the group) where the model is of
    a supported family; text calls and other models keep the embedded model's batched decoder.
    `group_decode=True` forces it on (eagerly, without graphs, on a CPU), False off. Concurrent
    token-path calls take turns: each decodes its own group."""

    def __init__(self, model_dir: str | Path, device: str | None = None, dtype: str | None = None,
                 group_decode: bool | None = None, **kwargs: Any):
        import torch

        on_gpu = (device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
        if on_gpu:  # GPU prefill is cheap: bigger chunks, more prefixes kept
            kwargs.setdefault("prefill_chunk", 512)
            kwargs.setdefault("prefix_cache_bytes", 4 << 30)
        super().__init__(model_dir, device=device, dtype=dtype or ("bfloat16" if on_gpu else None), **kwargs)
        from mirl.llm.group_decode import GroupDecoder

        use = on_gpu if group_decode is None else group_decode
        self.group = GroupDecoder(self.model) if use and GroupDecoder.supports(self.model) else None

    def generate_tokens(self, prompt_ids, sample_indices, max_tokens: int = 256, temperature: float = 1.0,
                        top_p: float = 1.0, seed: int = 0) -> TokenGeneration:
        """The `Generator` interface; with group decoding, row r draws with seed (seed, index r)."""
        if self.group is None:
            return super().generate_tokens(prompt_ids, sample_indices, max_tokens, temperature, top_p, seed)
        import torch

        from mirl.llm.embedded import _kv_layers

        ids = check_prompt(prompt_ids, int(getattr(self.model.config, "vocab_size", 0)) or None)
        self._check_context(len(ids), max_tokens)
        t0 = time.perf_counter()
        if max_tokens <= 0 or not sample_indices:
            return TokenGeneration([TokenSample([], [], "length") for _ in sample_indices], len(ids))
        with self._lock, torch.inference_mode():
            first, past = self._prefill(torch.tensor([ids], dtype=torch.long))
            self.last_prefill_seconds = time.perf_counter() - t0
            kv = _kv_layers(past)
            if kv is None:
                raise RuntimeError("this model's KV cache is not a plain per-layer cache")
            dtype = next(self.model.parameters()).dtype
            rows = self.group.generate([(k.to(dtype), v.to(dtype)) for k, v in kv], first,
                                       [row_seed(seed, i) for i in sample_indices], max_tokens, temperature,
                                       top_p, self.end_ids)
        samples = [TokenSample(ids=toks, logprobs=lps, finish_reason=reason) for toks, lps, reason in rows]
        return TokenGeneration(samples=samples, prompt_tokens=len(ids), cached_tokens=self.last_cached_tokens,
                               seconds=time.perf_counter() - t0,
                               meta={"decoder": "group", "prefill_s": round(self.last_prefill_seconds, 4)})

    def update_weights(self, weights: Any) -> None:
        super().update_weights(weights)
        if self.group is not None:
            self.group.clear()


def policy_engine(model: str | Path, backend: str = "auto", **kwargs: Any):
    """vLLM when `backend` is "vllm", or "auto" and vLLM is installed; transformers otherwise."""
    if backend not in ("auto", "vllm", "transformers"):
        raise ValueError(f"backend must be auto, vllm or transformers, got {backend!r}")
    if backend == "vllm" or (backend == "auto" and vllm_available()):
        return VLLMEngine(model, **kwargs)
    return TransformersEngine(model, **{k: v for k, v in kwargs.items() if k in ("device", "dtype")})
