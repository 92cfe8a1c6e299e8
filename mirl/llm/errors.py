"""Failures of LLM calls, classified so callers (and retries) can act on the kind, not the text.

Transient kinds (`rate_limit`, `server`, `timeout`, `connection`) are retried with backoff;
the others fail at once because retrying cannot fix them. Messages are redacted of API keys.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

RETRYABLE = ("rate_limit", "server", "timeout", "connection")
KINDS = RETRYABLE + ("auth", "not_found", "bad_request", "context_length", "invalid_json", "budget", "error")


class LLMError(RuntimeError):
    """A call that failed for good (after retries where retrying made sense); already in the ledger."""

    def __init__(self, kind: str, message: str, role: str = "", model: str = "", tries: int = 0):
        assert kind in KINDS, f"unknown LLMError kind {kind!r}"
        self.kind = kind
        self.role = role
        self.model = model
        self.tries = tries
        where = f"{role} ({model})" if role else model
        super().__init__(f"{kind}: {where}: {message}" if where else f"{kind}: {message}")

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE


class BudgetExceeded(LLMError):
    """The ledger's spend reached the configured cap; raised before the call, so nothing is spent.

    A stage catches it and stops cleanly, keeping what it has done so far."""

    def __init__(self, message: str, role: str = "", model: str = "", spent_usd: float = 0.0,
                 cap_usd: float = 0.0):
        self.spent_usd = spent_usd
        self.cap_usd = cap_usd
        super().__init__("budget", message, role=role, model=model)


def classify(exc: BaseException) -> str:
    """Map a litellm/openai/httpx exception to an error kind."""
    import httpx

    from mirl.engines.generator import ContextLengthError
    from mirl.llm.providers import import_litellm

    litellm = import_litellm()
    if isinstance(exc, ContextLengthError):  # an in-process engine's own error
        return "context_length"
    checks: list[tuple[tuple[type, ...], str]] = [
        ((litellm.ContextWindowExceededError,), "context_length"),
        ((litellm.AuthenticationError, litellm.PermissionDeniedError), "auth"),
        ((litellm.NotFoundError,), "not_found"),
        ((litellm.RateLimitError,), "rate_limit"),
        ((litellm.Timeout, httpx.TimeoutException, TimeoutError), "timeout"),
        ((litellm.BadRequestError, litellm.UnsupportedParamsError, litellm.UnprocessableEntityError,
          litellm.ContentPolicyViolationError), "bad_request"),
        ((litellm.InternalServerError, litellm.ServiceUnavailableError, litellm.BadGatewayError), "server"),
        ((litellm.APIConnectionError, httpx.TransportError, ConnectionError), "connection"),
    ]
    underneath = _transport_failure(exc)
    if underneath:  # litellm reports a refused or dropped connection as a 500 from the server
        return underneath
    for types_, kind in checks:
        if isinstance(exc, types_):
            return kind
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        if status == 429:
            return "rate_limit"
        if status in (401, 403):
            return "auth"
        if status == 404:
            return "not_found"
        if status >= 500:
            return "server"
        if 400 <= status < 500:
            return "bad_request"
    return "error"


def _transport_failure(exc: BaseException) -> str | None:
    """`timeout` or `connection` when an exception under `exc` (its causes) is a transport failure."""
    import httpx

    e = exc.__cause__ or exc.__context__
    for _ in range(12):
        if e is None:
            return None
        if isinstance(e, (httpx.TimeoutException, TimeoutError)):
            return "timeout"
        if isinstance(e, (httpx.TransportError, ConnectionError)):
            return "connection"
        e = e.__cause__ or e.__context__
    return None


def secret_values(env_names: Iterable[str]) -> list[str]:
    """The values of the named environment variables that are set (long enough to be keys)."""
    return [v for v in (os.environ.get(n, "") for n in env_names if n) if len(v) >= 4]


def redact(text: str, secrets: Iterable[str]) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text
