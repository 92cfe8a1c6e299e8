"""Fixtures for the LLM layer: a client over scripted models, with instant (recorded) backoff."""

from __future__ import annotations

import random
import uuid

import pytest

from mirl.llm.client import LLMClient
from mirl.llm.config import LLMConfig
from mirl.llm.scripted import ScriptedModel, register, unregister


@pytest.fixture
def scripted():
    """Register scripted models under unique names; returns make(replies, **kw) -> (model, 'scripted/<name>')."""
    names = []

    def make(replies, **kw):
        model = ScriptedModel(replies, name=f"t{uuid.uuid4().hex[:8]}", **kw)
        names.append(model.name)
        return model, register(model)

    yield make
    for n in names:
        unregister(n)


@pytest.fixture
def make_client(tmp_path):
    """make(role_models: dict, **config_fields) -> client whose sleeps are recorded in client.slept."""

    def make(role_models=None, stage="test", run_dir=None, **fields):
        fields.setdefault("backoff_s", 0.01)
        fields.setdefault("backoff_max_s", 0.05)
        cfg = LLMConfig(**fields)
        for role, model in (role_models or {}).items():
            cfg.role(role).model = model
        slept: list[float] = []
        client = LLMClient(cfg, run_dir or tmp_path / "run", stage, sleep=slept.append, rng=random.Random(0))
        client.slept = slept
        return client

    return make


USER = [{"role": "user", "content": "list the files in the current directory"}]
