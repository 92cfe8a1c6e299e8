"""JSON replies from chat models: find the object in the text and check it against a small schema.

Models wrap JSON in ```json fences and prose and sometimes think aloud with draft objects first,
so `extract_json` takes the LAST top-level JSON value of the wanted kind, unless the reply ends inside an
unfinished one (cut at the token limit): that is an error, never an earlier draft. Schemas are a subset of
JSON Schema, enough for judge outputs and cheap to write inline:

    {"type": "object",
     "required": ["verdict", "reason"],
     "properties": {"verdict": {"type": "string", "enum": ["good", "bad"]},
                    "reason": {"type": "string"},
                    "ids": {"type": "array", "items": {"type": "integer"}}},
     "additionalProperties": true}

Supported keywords: type (object, array, string, integer, number, boolean, null, or a list of
them), required, properties, additionalProperties (bool), items, enum, minItems, maxItems.
"""

from __future__ import annotations

import json
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}
_KEYWORDS = {"type", "required", "properties", "additionalProperties", "items", "enum", "minItems", "maxItems",
             "description", "title"}


class JSONReplyError(ValueError):
    """The reply holds no JSON value, or one that does not fit the schema; the text says what to fix."""


def extract_json(text: str, kind: str = "object") -> Any:
    """The last top-level JSON value of `kind` ("object", "array" or "any") in `text`."""
    starts = {"object": "{", "array": "[", "any": "{["}[kind]
    decoder = json.JSONDecoder()
    found: list[Any] = []
    i = 0
    while i < len(text):
        if text[i] in starts:
            try:
                value, end = decoder.raw_decode(text, i)
            except json.JSONDecodeError:
                if _unfinished(text, i):  # cut off: an earlier value (a draft, or one nested in it) is not the answer
                    raise JSONReplyError("the reply ends inside an unfinished JSON value (cut off, e.g. at the token "
                                         "limit); answer with one complete, shorter JSON value") from None
                i += 1
                continue
            found.append(value)
            i = end
        else:
            i += 1
    if not found:
        what = {"object": "a JSON object", "array": "a JSON array", "any": "JSON"}[kind]
        raise JSONReplyError(f"the reply contains {what.replace('a ', 'no ', 1) if what != 'JSON' else 'no JSON'}; "
                             f"answer with {what} only")
    return found[-1]


def _unfinished(text: str, i: int) -> bool:
    """True when `text[i]` opens a JSON object or array that the text ends inside of (strings and nesting
    followed to the end), i.e. a reply cut off mid-value; braces of prose (`{x}`, a `{` then prose) are not."""
    j = i + 1
    while j < len(text) and text[j] in " \t\r\n":
        j += 1
    if j == len(text) or text[j] not in ('"}' if text[i] == "{" else '{["-0123456789tfn]'):
        return False
    depth, in_str, esc = 0, False, False
    for ch in text[i:]:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return False  # closed: a complete value that is not JSON, not a cut one
    return depth > 0


def _type_ok(value: Any, tp: str) -> bool:
    if tp not in _TYPES:
        raise ValueError(f"schema: unknown type {tp!r}; known: {', '.join(_TYPES)}")
    if isinstance(value, bool) and tp in ("integer", "number"):
        return False
    return isinstance(value, _TYPES[tp])


def validate(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """Every way `value` breaks `schema`, as readable messages (empty list = valid)."""
    unknown = set(schema) - _KEYWORDS
    if unknown:
        raise ValueError(f"schema at {path}: unsupported keyword(s) {sorted(unknown)}")
    errors: list[str] = []
    tp = schema.get("type")
    if tp is not None:
        tps = tp if isinstance(tp, list) else [tp]
        if not any(_type_ok(value, t) for t in tps):
            return [f"{path} must be {' or '.join(tps)}, got {type(value).__name__} {json.dumps(value)[:60]}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path} must be one of {json.dumps(schema['enum'])}, got {json.dumps(value)[:60]}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{path} is missing required field {key!r}")
        for key, sub in props.items():
            if key in value:
                errors.extend(validate(value[key], sub, f"{path}.{key}"))
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(props))
            if extra:
                errors.append(f"{path} has unexpected field(s) {extra}; allowed: {sorted(props)}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{path} needs at least {schema['minItems']} item(s), got {len(value)}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path} allows at most {schema['maxItems']} item(s), got {len(value)}")
        if "items" in schema:
            for i, item in enumerate(value):
                errors.extend(validate(item, schema["items"], f"{path}[{i}]"))
    return errors


def parse_reply(text: str, schema: dict[str, Any] | None, check: Any = None) -> Any:
    """Extract and validate; raises `JSONReplyError` listing what is wrong.

    `check(value) -> [problems]` adds what a schema cannot say (e.g. "every input id exactly once")."""
    kind = "any"
    if schema and schema.get("type") in ("object", "array"):
        kind = schema["type"]
    value = extract_json(text, kind)
    if schema:
        errors = validate(value, schema)
        if errors:
            raise JSONReplyError("the JSON does not fit the required format: " + "; ".join(errors[:8]))
    if check is not None:
        problems = list(check(value) or [])
        if problems:
            raise JSONReplyError("the JSON breaks the rules: " + "; ".join(problems[:8]))
    return value


def reask_message(error: str, schema: dict[str, Any] | None) -> dict[str, str]:
    """The user turn appended after an invalid reply."""
    text = f"Your previous reply could not be used: {error}."
    if schema:
        text += f"\nReply again with one JSON value that fits this schema:\n{json.dumps(schema)}"
    return {"role": "user", "content": text}
