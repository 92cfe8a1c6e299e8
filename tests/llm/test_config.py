from __future__ import annotations

import dataclasses

import pytest

from mirl.llm.config import EMBEDDED_MODEL, LLMConfig, RoleConfig, with_model
from mirl.llm.types import ROLES
from mirl.typed import ParamsError, build, load_params


def test_every_field_has_help():
    for cls in (LLMConfig, RoleConfig):
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help text"


def test_defaults_are_embedded_and_role_temperatures():
    cfg = LLMConfig()
    assert all(cfg.role(r).model == EMBEDDED_MODEL for r in ROLES)
    assert cfg.temperature("policy") == 1.0
    assert {cfg.temperature(r) for r in ROLES if r != "policy"} == {0.7}
    with pytest.raises(ValueError, match="unknown LLM role 'critic'"):
        cfg.role("critic")


def test_load_from_yaml(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text(
        "llm:\n"
        "  policy: {model: hosted_vllm/Qwen/Qwen3-8B, api_base: 'http://gpu:8000/v1', temperature: 0.9}\n"
        "  teacher: {model: anthropic/claude-sonnet-4-20250514, api_key_env: ANTHROPIC_API_KEY, batch_n: false}\n"
        "  prices: {hosted_vllm/Qwen/Qwen3-8B: {input: 0.1, output: 0.2}}\n"
        "  budget_usd: '5'\n"
    )
    cfg = load_params(LLMConfig, p, section="llm")
    assert cfg.policy.api_base == "http://gpu:8000/v1" and cfg.temperature("policy") == 0.9
    assert cfg.teacher.batch_n is False and cfg.key_envs() == ["ANTHROPIC_API_KEY"]
    assert cfg.budget_usd == 5.0 and cfg.localizer.model == EMBEDDED_MODEL


def test_typos_are_rejected_with_the_key():
    with pytest.raises(ParamsError, match="llm.policy.modle"):
        build(LLMConfig, {"policy": {"modle": "x"}}, prefix="llm.")


def test_with_model_copies():
    base = LLMConfig()
    cfg = with_model(base, policy="scripted/p")
    assert cfg.policy.model == "scripted/p" and base.policy.model == EMBEDDED_MODEL
