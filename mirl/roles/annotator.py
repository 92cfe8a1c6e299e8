"""The annotator role (LLM): propose error types, refine them on fresh batches, label every step.

Each error step is shown as three fields: the rejected command (long ones cut), a one-line
description of what it does, and the localizer's reason (the field that carries most of the
signal). Replies are JSON checked twice: by schema, and by rules a schema cannot say (every input id
exactly once, no unknown type names, no restated types). A reply that breaks them is re-asked with
the problems listed, then recorded as a failure (`LLMError(kind="invalid_json")`).
"""

from __future__ import annotations

import json
from typing import Any

from mirl.records.error_step import ErrorStep
from mirl.records.taxonomy import UNASSIGNED, ErrorType, name_problems

ROLE = "annotator"

_UNASSIGNED_ITEM = {"type": "object", "required": ["id", "reason"],
                    "properties": {"id": {"type": "string"}, "reason": {"type": "string", "enum": list(UNASSIGNED)}}}
_TYPE_ITEM = {"type": "object", "required": ["name", "definition", "example_ids"],
              "properties": {"name": {"type": "string"}, "definition": {"type": "string"},
                             "example_ids": {"type": "array", "items": {"type": "string"}}}}
_ASSIGNMENT = {"type": "object", "required": ["id", "types"],
               "properties": {"id": {"type": "string"}, "types": {"type": "array", "items": {"type": "string"}}}}

PROPOSE_SCHEMA = {"type": "object", "required": ["types", "unassigned"],
                  "properties": {"types": {"type": "array", "items": _TYPE_ITEM},
                                 "unassigned": {"type": "array", "items": _UNASSIGNED_ITEM}}}
REFINE_SCHEMA = {"type": "object", "required": ["assignments", "unassigned", "new_types"],
                 "properties": {"assignments": {"type": "array", "items": _ASSIGNMENT},
                                "unassigned": {"type": "array", "items": _UNASSIGNED_ITEM},
                                "new_types": {"type": "array", "items": _TYPE_ITEM}}}
LABEL_SCHEMA = {"type": "object", "required": ["assignments", "unassigned"],
                "properties": {"assignments": {"type": "array", "items": _ASSIGNMENT},
                               "unassigned": {"type": "array", "items": _UNASSIGNED_ITEM}}}

SYSTEM = """You study the mistakes of an agent that solves tasks in a Linux terminal. Each example is \
one step that a reviewer rejected: the command the agent proposed, what that command does, and the \
reviewer's reason. You group such steps into error types that are useful for training the agent \
to stop making them.

A good error type passes two tests:
- transfer: learning to avoid it on half of its examples would carry over to the other half, because \
it is one habit of working, not one missing piece of knowledge per example;
- frequency: it is common enough to matter.
Name each type by the behaviour in 2-5 words (never a tool, command or file name). Write its \
definition so that a yes/no question on ONE example decides it, and say what the type is NOT (name \
the nearest other type). An example that fits no type is `one_off` (a single slip), `new_pattern` \
(a recurring pattern no type covers yet) or `unclear` (cannot tell). Reply with JSON only."""

PROPOSE = """Propose error types for these rejected steps.

{examples}

Reply with one JSON object: {{"types": [{{"name": ..., "definition": ..., "example_ids": [...]}}], \
"unassigned": [{{"id": ..., "reason": "one_off" | "new_pattern" | "unclear"}}]}}. Every example id \
appears at least once (an example may fit several types) and never in both places."""

REFINE = """These are the error types so far:

{types}

Assign each of these new rejected steps to every existing type that fits. Propose a new type only \
when several of these examples share a pattern that no type covers; never restate an existing type.

{examples}

Reply with one JSON object: {{"assignments": [{{"id": ..., "types": [...]}}], "unassigned": \
[{{"id": ..., "reason": "one_off" | "new_pattern" | "unclear"}}], "new_types": [{{"name": ..., \
"definition": ..., "example_ids": [...]}}]}}. Every example id appears exactly once, in assignments \
or in unassigned."""

LABEL = """Label each rejected step with the error types below. The list is fixed: assign every type \
that fits, be strict rather than generous, and never invent, rename, widen or narrow a type.

{types}

{examples}

Reply with one JSON object: {{"assignments": [{{"id": ..., "types": [...]}}], "unassigned": \
[{{"id": ..., "reason": "one_off" | "new_pattern" | "unclear"}}]}}. Every example id appears \
exactly once, in assignments (with at least one type) or in unassigned."""


def cut(text: str | None, limit: int) -> str:
    text = "(no runnable command)" if text is None else str(text)
    marker = " ...[cut]... "
    if len(text) <= limit:
        return text
    head = max(0, limit - len(marker) - 10)
    return text[:head] + marker + text[-10:]


def example_fields(step: ErrorStep, max_command_chars: int = 300) -> dict[str, str]:
    return {"id": step.id, "command": cut(step.rejected_command, max_command_chars),
            "description": step.description or "", "reason": step.reason or ""}


def render_examples(steps: list[ErrorStep], max_command_chars: int = 300) -> str:
    return "\n".join(json.dumps(example_fields(s, max_command_chars), ensure_ascii=False) for s in steps)


def render_types(types: list[ErrorType], examples: dict[str, ErrorStep] | None = None, shown: int = 2,
                 max_command_chars: int = 300) -> str:
    blocks = []
    for t in types:
        block = f"- {t.name}: {t.definition}"
        for ex_id in (t.examples[:shown] if examples else []):
            if ex_id in examples:
                block += "\n    example: " + json.dumps(example_fields(examples[ex_id], max_command_chars),
                                                      ensure_ascii=False)
        blocks.append(block)
    return "\n".join(blocks) if blocks else "(none yet)"


# --- rules a schema cannot express -----------------------------------------------------------------


def _id_problems(ids: list[str], seen_in_types: list[str], unassigned: list[str], exactly_once: bool) -> list[str]:
    problems = []
    wanted = set(ids)
    for i in sorted(set(seen_in_types + unassigned) - wanted):
        problems.append(f"id {i!r} is not one of the examples")
    for i in sorted(wanted - set(seen_in_types) - set(unassigned)):
        problems.append(f"id {i!r} is missing")
    for i in sorted(set(seen_in_types) & set(unassigned)):
        problems.append(f"id {i!r} is both assigned and unassigned")
    repeated = sorted({i for i in unassigned if unassigned.count(i) > 1}
                      | ({i for i in seen_in_types if seen_in_types.count(i) > 1} if exactly_once else set()))
    problems += [f"id {i!r} appears more than once" for i in repeated]
    return problems


def check_propose(ids: list[str]):
    def check(value: dict[str, Any]) -> list[str]:
        in_types = [i for t in value["types"] for i in dict.fromkeys(t["example_ids"])]
        problems = _id_problems(ids, in_types, [u["id"] for u in value["unassigned"]], exactly_once=False)
        names = [t["name"] for t in value["types"]]
        problems += [f"type {n!r} is proposed twice" for n in sorted({n for n in names if names.count(n) > 1})]
        for t in value["types"]:
            problems += name_problems(t["name"])
        return problems
    return check


def check_assignments(ids: list[str], known: list[str], allow_new: bool = False):
    def check(value: dict[str, Any]) -> list[str]:
        assigned = [a["id"] for a in value["assignments"]]
        problems = _id_problems(ids, assigned, [u["id"] for u in value["unassigned"]], exactly_once=True)
        new = [t["name"] for t in value.get("new_types") or []] if allow_new else []
        names = set(known) | set(new)
        for a in value["assignments"]:
            if not a["types"]:
                problems.append(f"id {a['id']!r} is assigned no type (put it in unassigned)")
            problems += [f"id {a['id']!r}: unknown type {t!r}" for t in a["types"] if t not in names]
        lowered = {k.lower() for k in known}
        problems += [f"new type {n!r} restates an existing type" for n in new if n.lower() in lowered]
        for n in new:
            problems += name_problems(n)
        return problems
    return check


class LLMAnnotator:
    """Propose, refine and label through the LLM client (cached, costed, re-asked on bad JSON)."""

    def __init__(self, client: Any, max_command_chars: int = 300, shown_examples: int = 2):
        self.client, self.max_command_chars, self.shown = client, max_command_chars, shown_examples

    def _ask(self, prompt: str, schema: dict[str, Any], check) -> dict[str, Any]:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
        return self.client.complete_json(ROLE, messages, schema, check=check)

    def propose(self, batch: list[ErrorStep]) -> dict[str, Any]:
        prompt = PROPOSE.format(examples=render_examples(batch, self.max_command_chars))
        return self._ask(prompt, PROPOSE_SCHEMA, check_propose([s.id for s in batch]))

    def refine(self, types: list[ErrorType], batch: list[ErrorStep]) -> dict[str, Any]:
        prompt = REFINE.format(types=render_types(types), examples=render_examples(batch, self.max_command_chars))
        return self._ask(prompt, REFINE_SCHEMA, check_assignments([s.id for s in batch], [t.name for t in types],
                                                                   allow_new=True))

    def label(self, types: list[ErrorType], batch: list[ErrorStep], examples: dict[str, ErrorStep]) -> dict[str, Any]:
        prompt = LABEL.format(types=render_types(types, examples, self.shown, self.max_command_chars),
                              examples=render_examples(batch, self.max_command_chars))
        return self._ask(prompt, LABEL_SCHEMA, check_assignments([s.id for s in batch], [t.name for t in types]))
