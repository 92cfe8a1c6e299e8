"""The Model seam: chat messages in, text + token usage out.

Everything that proposes or judges steps (policy, localizer, teacher, annotator, judges) talks to a
`Model`. Real ones go through `mirl.llm.client` (litellm, the in-process engines of `mirl.engines`); tests use
`mirl.llm.scripted.ScriptedModel`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, Any]  # {"role": "system"|"user"|"assistant"|"tool", "content": str, ...}

ROLES = (
    "policy",
    "localizer",
    "teacher",
    "annotator",
    "behavior_judge",
    "rubric_writer",
    "rubric_judge",
    "step_judge",
)


@dataclass
class Completion:
    """One sampled answer and what it cost."""

    text: str
    model: str = ""
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    cache_hit: bool = False
    finish_reason: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI-style tool calls, if any
    sample_index: int = 0  # which sample of this prompt it is (the cache stores each index separately)
    parsed: Any = None  # the validated JSON value, when the call asked for a schema


@runtime_checkable
class Model(Protocol):
    """A chat model in one role. `n` answers to one prompt come back as one list."""

    name: str

    def complete(self, messages: list[Message], n: int = 1, **kwargs: Any) -> list[Completion]: ...
