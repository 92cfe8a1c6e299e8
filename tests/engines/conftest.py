"""The engines' tests use the LLM layer's fixtures (a client over scripted or local models)."""

import sys

import pytest

from tests.llm.conftest import make_client, scripted  # noqa: F401


@pytest.fixture(autouse=True)
def _switch_interval():
    """A paged engine lowers its process's thread switch interval for good: each test leaves it as it found it."""
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)
