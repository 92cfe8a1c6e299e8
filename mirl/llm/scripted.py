"""A deterministic model for tests and dry runs: replies come from a list or a function.

Use it directly as a `Model` (`ScriptedModel(["a", "b"]).complete(messages)`), or through the
client like any other model: `register(model)` makes it answer `scripted/<name>` inside litellm,
so the cache, ledger, retries and budget of `mirl.llm.client` are exercised exactly as for a real
model. It is never a product default.

Token counts are word counts (input: all message contents; output: the reply), so usage sums in
tests are predictable. A list entry that is an exception instance is raised instead of answered,
which is how tests inject rate limits, server errors and timeouts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from mirl.llm.types import Completion, Message

# A reply is text, an exception to raise, or {"content": str, "tool_calls": [OpenAI-style calls]}.
Reply = str | dict[str, Any] | BaseException
ReplyFn = Callable[[list[Message]], Reply]


class ScriptRanOut(RuntimeError):
    """A scripted model was asked for more replies than its script holds."""


def count_words(text: Any) -> int:
    """Token stand-in: whitespace-separated words (content lists are flattened)."""
    if isinstance(text, list):
        return sum(count_words(part.get("text", "") if isinstance(part, dict) else part) for part in text)
    return len(str(text or "").split())


def input_words(messages: list[Message]) -> int:
    return sum(count_words(m.get("content", "")) for m in messages)


class ScriptedModel:
    """Answers from `replies` in order (or `replies(messages)`), one entry per sample.

    `cycle=True` wraps around a list instead of raising `ScriptRanOut`. Every prompt received is
    kept in `calls` (one entry per `complete` call), so tests can assert what the model was shown.
    """

    def __init__(self, replies: Sequence[Reply] | ReplyFn, name: str = "scripted", cycle: bool = False):
        if not callable(replies) and not isinstance(replies, Sequence):
            raise TypeError("ScriptedModel needs a list of replies or a function (messages) -> str")
        if isinstance(replies, str):
            raise TypeError("ScriptedModel needs a list of replies, not one string; wrap it in a list")
        self.name = name
        self._replies = replies
        self._cycle = cycle
        self._next = 0
        self._lock = threading.Lock()
        self.calls: list[list[Message]] = []

    @property
    def remaining(self) -> int | None:
        """Replies left in a list script (None for a function or a cycling script)."""
        if callable(self._replies) or self._cycle:
            return None
        return len(self._replies) - self._next

    def _one(self, messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
        if callable(self._replies):
            reply = self._replies(messages)
        else:
            with self._lock:
                if self._next >= len(self._replies):
                    if not self._cycle or not self._replies:
                        raise ScriptRanOut(
                            f"scripted model {self.name!r} ran out of replies after {self._next}"
                        )
                    self._next = 0
                reply = self._replies[self._next]
                self._next += 1
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, dict):
            return str(reply.get("content") or ""), list(reply.get("tool_calls") or [])
        if not isinstance(reply, str):
            raise TypeError(f"scripted model {self.name!r}: reply must be a string, got {type(reply).__name__}")
        return reply, []

    def complete(self, messages: list[Message], n: int = 1, **kwargs: Any) -> list[Completion]:
        """`n` replies to one prompt; sampling keyword arguments are accepted and ignored."""
        with self._lock:
            self.calls.append([dict(m) for m in messages])
        n_in = input_words(messages)
        out = []
        for i in range(n):
            text, calls = self._one(messages)
            n_out = count_words(text) + sum(count_words(c.get("function", {}).get("arguments", "")) for c in calls)
            out.append(Completion(text=text, model=f"scripted/{self.name}", input_tokens=n_in, output_tokens=n_out,
                                  finish_reason="tool_calls" if calls else "stop", tool_calls=calls, sample_index=i))
        return out


# --- litellm provider: `scripted/<name>` -------------------------------------------------------

_REGISTRY: dict[str, ScriptedModel] = {}
_REGISTRY_LOCK = threading.Lock()


def register(model: ScriptedModel) -> str:
    """Make `model` answer litellm calls to `scripted/<model.name>` (through an `LLMClient`, which
    installs the provider); returns that model string."""
    with _REGISTRY_LOCK:
        _REGISTRY[model.name] = model
    return f"scripted/{model.name}"


def unregister(name: str) -> None:
    with _REGISTRY_LOCK:
        _REGISTRY.pop(name, None)


def lookup(name: str) -> ScriptedModel:
    with _REGISTRY_LOCK:
        model = _REGISTRY.get(name)
    if model is None:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise LookupError(f"no scripted model named {name!r} is registered (registered: {known})")
    return model
