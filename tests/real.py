"""Real components that the README's set-up installs (podman, bwrap, the base image, SmolLM2).

Under that set-up (CI, `bash scripts/test.sh`, or root with apt-get, where it would have installed
them) a missing or broken one is a test failure that says why; anywhere else it is a skip that
says what to install. Only what a machine truly cannot have (a GPU, vLLM) is skipped everywhere.
"""

from __future__ import annotations

import os
import shutil

import pytest


def required() -> bool:
    """True where the README's set-up has run or could have: missing real components are failures."""
    flag = os.environ.get("MIRL_REQUIRE_REAL", "")
    if flag:
        return flag not in ("0", "false", "no")
    return bool(os.environ.get("CI")) or (os.geteuid() == 0 and shutil.which("apt-get") is not None)


def missing(what: str, how: str = "run `bash scripts/setup.sh --system`") -> None:
    """Fail (set-up machine) or skip (elsewhere): `what` is missing or broken; `how` says how to get it."""
    message = f"{what} ({how})"
    if required():
        pytest.fail(f"real component missing or broken: {message}", pytrace=False)
    pytest.skip(message)
