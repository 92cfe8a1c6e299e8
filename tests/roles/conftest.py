"""LLM roles through the real client (litellm over HTTP) against the scripted OpenAI-compatible server."""

from __future__ import annotations

import pytest

from tests.fakes.openai_server import scripted, serve

KEY_ENV = "MIRL_TEST_ROLES_KEY"


@pytest.fixture
def http_role(tmp_path, monkeypatch):
    """start(role, replies) -> (client, request bodies received): `role` is served by a local server
    answering from `replies` in order (the last repeats); 3 asks per reply, no transport retries."""
    from mirl.llm.client import LLMClient
    from mirl.llm.config import LLMConfig

    monkeypatch.setenv(KEY_ENV, "sk-roles-test-0000000000")
    started = []

    def start(role: str, replies: list):
        srv, url = serve(reply=scripted(replies))
        started.append(srv)
        cfg = LLMConfig(json_tries=3, max_tries=1)
        rc = cfg.role(role)
        rc.model, rc.api_base, rc.api_key_env = "openai/test-model", url, KEY_ENV
        return LLMClient(cfg, run_dir=tmp_path / "run", stage="train"), srv.RequestHandlerClass.requests

    yield start
    for srv in started:
        srv.shutdown()
        srv.server_close()
