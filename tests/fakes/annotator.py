"""Annotator replies for test servers: read the example ids from the prompt, answer in the asked format.

Types follow a fixed rule on the rejected command (a reply with no command vs one with a command),
so the expected labels can be derived independently in a test.
"""

from __future__ import annotations

import json
import re

SYSTEM_MARK = "You study the mistakes of an agent"
NO_COMMAND = "replies without any command"
ACTS = "acts without checking first"


def _examples(block: str) -> list[dict]:
    return [json.loads(line) for line in block.splitlines() if line.startswith('{"id": ')]


def _type_of(example: dict) -> str:
    return NO_COMMAND if example["command"] == "(no runnable command)" else ACTS


def annotator_reply(prompt: str) -> str:
    if prompt.startswith("Propose"):
        ex = _examples(prompt)
        types = sorted({_type_of(e) for e in ex})
        return json.dumps({"types": [{"name": t, "definition": f"{t}; not the other type",
                                      "example_ids": [e["id"] for e in ex if _type_of(e) == t]} for t in types],
                           "unassigned": []})
    blocks = prompt.split("\n\n")
    listed = next(b for b in reversed(blocks) if b.startswith('{"id": '))
    ex = _examples(listed)
    known = re.findall(r"^- ([^:]+):", prompt, flags=re.M)
    if prompt.startswith("These are the error types"):  # refine: a kind no type covers becomes a new type
        new = sorted({_type_of(e) for e in ex} - set(known))
        return json.dumps({"assignments": [{"id": e["id"], "types": [_type_of(e)]} for e in ex], "unassigned": [],
                           "new_types": [{"name": t, "definition": f"{t}; not the other type",
                                          "example_ids": [e["id"] for e in ex if _type_of(e) == t]} for t in new]})
    assignments = [{"id": e["id"], "types": [_type_of(e)]} for e in ex if _type_of(e) in known]
    unassigned = [{"id": e["id"], "reason": "new_pattern"} for e in ex if _type_of(e) not in known]
    return json.dumps({"assignments": assignments, "unassigned": unassigned})
