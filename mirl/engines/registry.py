"""The process-wide engines behind `local/<name>` models, and the choice of engine for a checkpoint.

The litellm provider `local/...` (`mirl.llm.providers`) and the token path (`LLMClient.generator`)
find their engine here. An engine is loaded once per process and shared by every thread: concurrent
episodes' requests then meet in one engine, which batches them.

Which engine serves a checkpoint (`policy_engine`, backend "auto"): vLLM when it is installed and a
GPU is there; else on a GPU the continuous-batching engine (`mirl.engines.paged`) for the model
families it supports; else the CPU engine (`mirl.engines.embedded`).
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

from mirl.engines.weights import LOCATORS, plain_checkpoint

BACKENDS = ("auto", "vllm", "paged", "embedded")

_MODELS: dict[str, Any] = {}
_MODELS_LOCK = threading.Lock()


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def policy_engine(source: str | Path, backend: str = "auto", name: str | None = None, **kwargs: Any) -> Any:
    """An engine over `source` (a checkpoint directory or a .gguf). `kwargs` go to the engine
    (e.g. device, dtype; for vLLM its own arguments)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        from mirl.engines.paged.model import supports_config

        if _cuda() and vllm_available():
            backend = "vllm"
        elif str(kwargs.get("device") or ("cuda" if _cuda() else "cpu")).startswith("cuda") \
                and supports_config(source):
            backend = "paged"
        else:
            backend = "embedded"
    if backend == "vllm":
        from mirl.engines.vllm_engine import VLLMEngine

        engine = VLLMEngine(source, **kwargs)
    elif backend == "paged":
        from mirl.engines.paged import PagedEngine

        engine = PagedEngine(source, **kwargs)
    else:
        from mirl.engines.embedded import EmbeddedLM

        engine = EmbeddedLM(source, **kwargs)
    if name:
        engine.name = name
    return engine


def serve(name: str, engine: Any) -> str:
    """Make `engine` (anything with the engines' `generate` signature) answer `local/<name>`."""
    with _MODELS_LOCK:
        _MODELS[name] = engine
    return f"local/{name}"


def forget(name: str) -> None:
    """Drop the process-wide engine of `local/<name>` and close it (its decode thread ends), so that its
    memory goes once nothing else holds it."""
    with _MODELS_LOCK:
        engine = _MODELS.pop(name, None)
    close = getattr(engine, "close", None)
    if callable(close):
        close()


def get(name: str = "smollm2") -> Any:
    """The process-wide engine for `local/<name>`: one served with `serve`, a bundled model, or a
    Hugging Face checkpoint directory (`local/path/to/dir`), loaded on first use."""
    with _MODELS_LOCK:
        if name not in _MODELS:
            if name in LOCATORS:
                gguf = LOCATORS[name]()
                if _cuda():
                    _MODELS[name] = policy_engine(plain_checkpoint(gguf), name=gguf.stem)
                else:
                    from mirl.engines.embedded import load_gguf

                    _MODELS[name] = load_gguf(gguf)
            elif (Path(name) / "config.json").is_file():  # local/<a Hugging Face checkpoint directory>
                _MODELS[name] = policy_engine(name)
            else:
                known = ", ".join(sorted(set(LOCATORS) | set(_MODELS)))
                raise LookupError(f"no local model named {name!r} (known: {known}; or local/<checkpoint "
                                  "directory with a config.json>)")
        return _MODELS[name]
