"""Ask an LLM role for a reply that ends in a tag (`<score>7</score>`, `<answer>yes</answer>`).

Judges that think aloud before a one-word verdict end with a tag rather than JSON. A reply whose
tag is missing or unusable is re-asked with what was wrong, at most `tries` asks in all (the
client's `json_tries` by default); then the failure is recorded in the ledger and raised as
`LLMError(kind="invalid_json")`, exactly as an invalid JSON reply is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class TagError(ValueError):
    """A reply without a usable final tag; the message says what was wrong."""


def last_tag(text: str, tag: str) -> str:
    """The content of the LAST `<tag>...</tag>` in `text`, stripped; TagError when there is none, or when
    the reply ends inside an unfinished `<tag>` (cut off: the earlier tags are not its answer)."""
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", text or "", re.IGNORECASE | re.DOTALL)
    if unfinished_tag(text, tag):
        raise TagError(f"the reply ends inside an unfinished <{tag}> tag (cut off, e.g. at the token limit)")
    if not found:
        raise TagError(f"the reply has no <{tag}>...</{tag}> tag")
    return found[-1].strip()


def unfinished_tag(text: str, tag: str) -> bool:
    """True when, after its last complete `<tag>...</tag>`, the reply opens `<tag>` again and ends before
    closing it: a reply cut at the token limit, whose earlier tags were drafts, not its answer."""
    text = text or ""
    closes = [m.end() for m in re.finditer(rf"</{tag}>", text, re.IGNORECASE)]
    return re.search(rf"<{tag}>", text[closes[-1] if closes else 0:], re.IGNORECASE) is not None


def before_tag(text: str, tag: str) -> str:
    """What the reply says before its first tag: the judge's thinking."""
    return re.split(rf"<{tag}>", text or "", maxsplit=1, flags=re.IGNORECASE)[0].strip()


def ask_tagged(client: Any, role: str, messages: list[dict[str, str]], parse: Callable[[str], T], reask: str,
               tries: int | None = None, sample_index: int = 0) -> tuple[T, str]:
    """(parse(reply), reply text) of the first usable reply; `parse` raises ValueError on an
    unusable one, and `reask` (with `{error}`) is the user turn that asks again."""
    from mirl.llm.errors import LLMError

    tries = max(1, tries or client.config.json_tries)
    model = client.config.role(role).model
    convo, error = list(messages), ""
    for _ in range(tries):
        [c] = client.complete(role, convo, n=1, sample_offset=sample_index)
        try:
            return parse(c.text), c.text
        except ValueError as e:
            error = str(e)
            convo = convo + [{"role": "assistant", "content": c.text},
                             {"role": "user", "content": reask.format(error=error)}]
    msg = f"no usable reply after {tries} ask(s): {error}"
    client.ledger.record(role=role, stage=client.stage, model=model, n=0, tries=tries, error=f"invalid_json: {msg}")
    raise LLMError("invalid_json", msg, role=role, model=model, tries=tries)
