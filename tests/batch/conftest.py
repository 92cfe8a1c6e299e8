from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from batch_pipeline import register_kernel  # noqa: E402


@pytest.fixture(scope="session")
def mirl_kernel(tmp_path_factory):
    """JUPYTER_PATH holding a `mirl` kernelspec for this interpreter (as scripts/setup.sh registers one)."""
    path = register_kernel(tmp_path_factory.mktemp("kernel"))
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = path
    yield path
    if old is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = old
