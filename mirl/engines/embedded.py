"""The CPU engine: a transformers causal LM run in-process, concurrent requests batched; no network, no keys.

It serves the embedded model, SmolLM2-135M-Instruct (`mirl.engines.weights`), as the litellm model
`local/smollm2` (see `mirl.engines.registry` and `mirl.llm.providers`), so it goes through the same
cache, ledger and retries as any hosted model. On a GPU the registry serves supported models with
the continuous-batching engine (`mirl.engines.paged`) instead.

- loaded once per process and shared by threads: concurrent requests decode as one batch (see
  `mirl.engines.embedded_batch`; 8 rows cost about twice one row on a CPU);
- the model's own chat template builds the prompt;
- n samples of one prompt decode as ONE batch, but each row draws from its own generator seeded by
  (seed, sample index), so a given (seed, index) gives the same text whatever it was batched with
  (up to float rounding differences between batch shapes);
- usage is real: prompt tokens and generated tokens up to and including the end token;
- prefix caching: an agent calls once per step with the whole conversation so far, so each prompt
  begins with the previous one. The KV caches of recent prompts are kept (an LRU of 64 entries and
  1 GB: one per concurrent episode and then some) and a new prompt prefills only what follows its
  longest cached prefix. The prompt is prefilled in chunks of `prefill_chunk` tokens at fixed positions (0, C, 2C, ...) and
  only whole chunks are cached, so a warm call runs exactly the computations of a cold one: the
  text is identical with the cache warm or cold, not just close (given deterministic kernels, as
  on CPU). `EmbeddedLM(..., prefix_cache=False)` turns it off and prefills each prompt in one pass
  (faster for a prompt seen once; its text may differ from the chunked one by float rounding);
- a token-level generator too (`mirl.engines.generator`): `generate_tokens(prompt_ids, ...)` returns the
  sampled ids and each one's log-probability through the same batcher and prefix cache, and
  `update_weights(...)` swaps the weights and empties the prefix cache. The sampler runs in float32
  throughout, so its logprobs are the learner's (a float32 teacher-forced pass) to float rounding.
  `EmbeddedLM(..., prefill_bf16=True)` prefills prompts in a bfloat16 copy instead (1.8x faster prefill
  on CPUs with bf16 matrix instructions); its logprobs then differ from float32 by about 1e-3 to 1e-2,
  so it is for text generation only, never for a policy that is trained.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from mirl.engines.embedded_batch import DecodeBatcher, Request, _kv_layers
from mirl.engines.generator import Generation, Sample, TokenGeneration, TokenSample, check_context, check_prompt
from mirl.engines.weights import damaged, end_ids, load_model, load_state, model_name, plain_checkpoint


class EmbeddedLM:
    """A causal LM run by transformers, with batched, per-row-seeded sampling.

    `source` is a .gguf file (the embedded model) or a Hugging Face model directory (a policy
    checkpoint)."""

    def __init__(self, source: str | Path, device: str | None = None, dtype: str | None = None,
                 prefix_cache: bool = True, prefix_cache_entries: int = 64, prefix_cache_bytes: int = 1 << 30,
                 prefill_chunk: int = 128, prefill_bf16: bool = False):
        import inspect

        import torch

        t0 = time.perf_counter()
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model, self.tokenizer = load_model(source, self.device, dtype)
        # prefill_bf16: prompts prefilled by a bfloat16 copy, only where the CPU has bf16 matrix
        # instructions (prefill is bound by arithmetic; batched decode is not, and bf16 rounds more
        # differently between batch shapes)
        prefill_bf16 = bool(prefill_bf16 and self.device == "cpu" and self.model.dtype == torch.float32
                            and getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)())
        self.prefill_model = self.model
        if prefill_bf16:
            import copy

            self.prefill_model = copy.deepcopy(self.model).to(torch.bfloat16).eval()
        self.load_seconds = time.perf_counter() - t0
        self.name = model_name(source)
        self.context_length = int(getattr(self.model.config, "max_position_embeddings", 2048) or 2048)
        self.end_ids = end_ids(self.tokenizer)
        # transformers 5 renamed the KV-cache argument and output field from past_key_values to cache
        params = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        # only the last position's logits are used: skip the LM head elsewhere (a fifth of a small model)
        self._keep_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
        self._lock = threading.Lock()  # held by the decode thread while it runs the model
        self._batcher = DecodeBatcher(self)
        # prefix cache: prompt token ids (a whole number of chunks) -> per-layer (keys, values), batch row 1
        self.prefix_cache = prefix_cache
        self.prefix_cache_entries = prefix_cache_entries
        self.prefix_cache_bytes = prefix_cache_bytes
        self.prefill_chunk = max(1, int(prefill_chunk))
        self._prefixes: OrderedDict[tuple[int, ...], tuple[list[tuple[Any, Any]], int]] = OrderedDict()
        self.last_prefill_tokens = 0  # prompt tokens the last call ran through the model
        self.last_cached_tokens = 0  # prompt tokens the last call took from the prefix cache
        self.last_prefill_seconds = 0.0  # time the last call spent on its prompt
        self.weights_version = 0  # how many times update_weights has swapped the weights

    @property
    def stats(self) -> dict[str, Any]:
        """Where the decode thread's time went (see `embedded_batch.DecodeBatcher.stats`)."""
        return self._batcher.stats

    def close(self) -> None:
        """End the decode thread (a later call starts it again), so nothing holds the model but its owner."""
        self._batcher.stop()

    def clear_prefix_cache(self) -> None:
        """Forget the cached prompt prefixes (needed after changing the model's weights in place)."""
        with self._lock:
            self._prefixes.clear()

    @property
    def prefix_cache_size(self) -> tuple[int, int]:
        """(entries, bytes) held by the prefix cache."""
        return len(self._prefixes), sum(nbytes for _, nbytes in self._prefixes.values())

    def _cached_prefix(self, prompt: tuple[int, ...]):
        """The longest usable cached prefix of `prompt`: (its length, its key) or (0, None). Usable
        means a whole number of chunks that leaves at least the last prompt token to run."""
        c = self.prefill_chunk
        limit = (len(prompt) - 1) // c * c
        best, best_key = 0, None
        for key in self._prefixes:
            n = min(len(key), limit)
            common = next((i for i in range(n) if key[i] != prompt[i]), n)
            common = common // c * c
            if common > best:
                best, best_key = common, key
        return best, best_key

    def _remember(self, prompt: tuple[int, ...], past, reused: int) -> None:
        """Keep the whole chunks of this prompt's cache (copies, so generation cannot touch them)."""
        keep = len(prompt) // self.prefill_chunk * self.prefill_chunk
        kv = _kv_layers(past)
        if keep <= reused or kv is None:  # nothing new beyond the entry it came from
            return
        key = prompt[:keep]
        if key in self._prefixes:
            self._prefixes.move_to_end(key)
            return
        kv = [(k[:, :, :keep].clone(), v[:, :, :keep].clone()) for k, v in kv]
        nbytes = sum(k.element_size() * k.nelement() + v.element_size() * v.nelement() for k, v in kv)
        if nbytes > self.prefix_cache_bytes or self.prefix_cache_entries < 1:
            return
        for old in [o for o in self._prefixes if len(o) <= keep and key[:len(o)] == o]:
            del self._prefixes[old]  # a prefix of the new entry: the new one serves all its hits
        self._prefixes[key] = (kv, nbytes)
        while len(self._prefixes) > self.prefix_cache_entries or self.prefix_cache_size[1] > self.prefix_cache_bytes:
            self._prefixes.popitem(last=False)

    @staticmethod
    def _new_cache(kv: list[tuple[Any, Any]]):
        """A fresh DynamicCache over `kv`: it grows by concatenation, so a cached entry is never written."""
        from transformers import DynamicCache

        cache = DynamicCache()
        for i, (k, v) in enumerate(kv):
            cache.update(k, v, i)
        return cache

    def _prefill(self, ids):
        """Run the prompt `ids` (a 1-row tensor) from its longest cached prefix, in fixed-position
        chunks: (the last position's logits, the cache)."""
        if not self.prefix_cache:  # the whole prompt in one forward pass: fastest when nothing is reused
            self.last_cached_tokens, self.last_prefill_tokens = 0, int(ids.shape[1])
            return self._step(ids.to(self.device), model=self.prefill_model)
        prompt = tuple(int(t) for t in ids[0].tolist())
        start, key = self._cached_prefix(prompt)
        past = None
        if key is not None:
            self._prefixes.move_to_end(key)
            past = self._new_cache([(k[:, :, :start], v[:, :, :start]) for k, v in self._prefixes[key][0]])
        ids = ids.to(self.device)
        c = self.prefill_chunk
        for s in range(start, len(prompt), c):
            logits, past = self._step(ids[:, s:s + c], past, model=self.prefill_model)
        self._remember(prompt, past, start)
        self.last_cached_tokens, self.last_prefill_tokens = start, len(prompt) - start
        return logits, past

    def _step(self, input_ids, past=None, model=None, **extra):
        kw = {self._cache_kw: past, **extra} if past is not None else {}
        if self._keep_kw:
            kw[self._keep_kw] = 1
        out = (model or self.model)(input_ids=input_ids, use_cache=True, **kw)
        return out.logits[:, -1, :], getattr(out, self._cache_kw)

    def prompt_ids(self, messages: list[dict[str, Any]]):
        msgs = [{"role": str(m.get("role", "user")), "content": _text(m.get("content"))} for m in messages]
        enc = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, return_dict=True,
                                                 return_tensors="pt")
        return enc["input_ids"]

    def generate(self, messages: list[dict[str, Any]], sample_indices: list[int], max_tokens: int = 256,
                 temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
                 stop: str | list[str] | None = None) -> Generation:
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        ids = self.prompt_ids(messages)
        n_prompt = int(ids.shape[1])
        self._check_context(n_prompt, max_tokens)
        t0 = time.perf_counter()
        if max_tokens <= 0 or not sample_indices:
            return Generation([Sample("", 0, "length") for _ in sample_indices], n_prompt, time.perf_counter() - t0)
        req = self._batcher.run(Request(ids, list(sample_indices), max_tokens, temperature, top_p, seed, stops))
        samples = []
        for r, text in enumerate(req.texts):
            reason = req.reason[r]
            if stops:
                cut = _cut_at_stop(text, stops)
                if cut is not None:
                    text, reason = cut, "stop"
            samples.append(Sample(text=text, output_tokens=len(req.tokens[r]), finish_reason=reason))
        return Generation(samples=samples, prompt_tokens=n_prompt, seconds=time.perf_counter() - t0,
                          cached_tokens=req.cached_tokens)

    def generate_tokens(self, prompt_ids, sample_indices, max_tokens: int = 256, temperature: float = 1.0,
                        top_p: float = 1.0, seed: int = 0, stop_ids=None) -> TokenGeneration:
        """The `Generator` interface: samples of the prompt `prompt_ids`, decoded in the shared
        batch, with per-row seeds (seed, sample index) as in `generate`; no stop strings (a
        sample ends at one of `stop_ids`, default the end ids, or at max_tokens)."""
        import torch

        ids = check_prompt(prompt_ids, int(getattr(self.model.config, "vocab_size", 0)) or None)
        self._check_context(len(ids), max_tokens)
        t0 = time.perf_counter()
        if max_tokens <= 0 or not sample_indices:
            return TokenGeneration([TokenSample([], [], "length") for _ in sample_indices], len(ids))
        req = self._batcher.run(Request(torch.tensor([ids], dtype=torch.long), list(sample_indices), max_tokens,
                                        temperature, top_p, seed, [],
                                        stop_ids=None if stop_ids is None else {int(t) for t in stop_ids}))
        samples = [TokenSample(ids=list(req.tokens[r]), logprobs=list(req.logprobs[r]), finish_reason=req.reason[r])
                   for r in range(req.rows)]
        return TokenGeneration(samples=samples, prompt_tokens=len(ids), cached_tokens=req.cached_tokens,
                               seconds=time.perf_counter() - t0)

    def update_weights(self, weights) -> None:
        """Load new weights (a state dict, or a checkpoint directory / .safetensors file) into the
        model and its bf16 prefill copy, and drop the prefix cache built with the old ones.

        Keys not given keep their values; unknown keys are an error. Call it between generation
        rounds: requests still decoding hold KV caches of the old weights, so it refuses then."""
        state = load_state(weights)
        with self._lock:  # the decode thread holds it while it runs a step
            if self._batcher.live:
                raise RuntimeError(f"update_weights while {self._batcher.live} request(s) are decoding: their KV "
                                   "caches were built with the old weights; call it between generation rounds")
            import torch

            with torch.no_grad():
                _, unexpected = self.model.load_state_dict(state, strict=False)
                if unexpected:
                    raise KeyError(f"weights not in {self.name}: {sorted(unexpected)[:5]}")
                if self.prefill_model is not self.model:
                    self.prefill_model.load_state_dict(self.model.state_dict(), strict=False)
            self._prefixes.clear()
        self.weights_version += 1

    def _check_context(self, n_prompt: int, max_tokens: int) -> None:
        check_context(n_prompt, max_tokens, self.context_length, self.name)

    def _decode(self, toks: list[int]) -> str:
        return self.tokenizer.decode([t for t in toks if t not in self.end_ids], skip_special_tokens=True)

    @staticmethod
    def _pick(logits, temperature: float, top_p: float, gens):
        import torch

        if temperature <= 0:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits / temperature, dim=-1)
        if 0 < top_p < 1:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            keep = sorted_p.cumsum(dim=-1) - sorted_p < top_p  # always keeps the top token
            sorted_p = sorted_p * keep
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        picks = [torch.multinomial(probs[r], 1, generator=g) for r, g in enumerate(gens)]
        return torch.cat(picks)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def _cut_at_stop(text: str, stops: list[str]) -> str | None:
    cuts = [text.index(s) for s in stops if s and s in text]
    return text[: min(cuts)] if cuts else None


def load_gguf(gguf: Path, **kwargs: Any) -> EmbeddedLM:
    """The embedded engine on a .gguf, loaded from its converted copy (made on first use).
    `kwargs` go to `EmbeddedLM` (e.g. prefill_bf16=True)."""
    source = plain_checkpoint(gguf)
    try:
        lm = EmbeddedLM(source, **kwargs)
    except Exception:  # noqa: BLE001 - a damaged copy: load the .gguf, and rewrite the copy next time
        if source == gguf:
            raise
        damaged(source)
        lm = EmbeddedLM(gguf, **kwargs)
    lm.name = gguf.stem
    return lm
