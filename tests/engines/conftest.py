"""The engines' tests use the LLM layer's fixtures (a client over scripted or local models)."""

from tests.llm.conftest import make_client, scripted  # noqa: F401
