"""Per-user places shared by every layer (images, root filesystems, converted models, LLM cache)."""

from __future__ import annotations

import os


def user_cache_dir() -> str:
    """Where built images, root filesystems and converted models live: $MIRL_CACHE or ~/.cache/mirl."""
    return os.environ.get("MIRL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mirl")
