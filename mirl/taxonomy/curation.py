"""Curating a taxonomy by hand: each operation is a plain function on (taxonomy, labels), and an edit
is a small mapping, so what a person clicked in JupyterLab is an edit list a papermill run replays.

    edits = [{"op": "rename", "type": "a b", "to": "c d"},
             {"op": "define", "type": "c d", "definition": "..."},
             {"op": "merge", "types": ["c d", "e f"], "into": "c d"},
             {"op": "split", "type": "c d", "ids": ["task/0/3"], "new": "g h", "definition": "..."},
             {"op": "move", "id": "task/0/3", "from": "g h", "to": "e f"},
             {"op": "long_tail", "type": "e f"},          # {"value": false} gives it back to the threshold
             {"op": "undo"}]                               # takes the previous edit back

Only what an edit touches is re-labelled: a changed definition re-labels the steps that carried the
type (through `relabel(taxonomy, ids) -> {id: [types]}`, e.g. the LLM annotator); the other
operations rewrite labels exactly and need no model.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mirl.records.taxonomy import ErrorType, Label, Taxonomy, name_problems

OPS = ("rename", "define", "merge", "split", "move", "long_tail", "undo")
Relabel = Callable[[Taxonomy, list[str]], dict[str, list[str]]]


class EditError(ValueError):
    """An edit that does not fit the taxonomy (unknown type, name taken, bad name, ...)."""


@dataclass
class State:
    taxonomy: Taxonomy
    labels: dict[str, Label]
    touched: set[str] = field(default_factory=set)  # ids whose labels an edit made stale


def _new_name(taxonomy: Taxonomy, name: str) -> str:
    problems = name_problems(name)
    if problems:
        raise EditError("; ".join(problems))
    if name in taxonomy.names():
        raise EditError(f"a type named {name!r} exists already")
    return name


def _replace_in_labels(labels: dict[str, Label], old: set[str], new: str, ids: set[str] | None = None) -> None:
    for label in labels.values():
        if ids is not None and label.id not in ids:
            continue
        if old & set(label.types):
            kept = [t for t in label.types if t not in old]
            label.types = list(dict.fromkeys([*kept, new]))
            label.unassigned = None


def apply_edit(state: State, edit: dict[str, Any]) -> State:
    """A new state with one edit applied (the given state is not changed)."""
    op = edit.get("op")
    if op not in OPS or op == "undo":
        raise EditError(f"unknown edit {edit!r}; edits: {', '.join(OPS)}")
    s = State(copy.deepcopy(state.taxonomy), copy.deepcopy(state.labels), set(state.touched))
    tax = s.taxonomy
    try:
        if op == "rename":
            t = tax.get(edit["type"])
            to = _new_name(tax, edit["to"])
            _replace_in_labels(s.labels, {t.name}, to)
            t.name, t.provenance = to, f"{t.provenance}; renamed from {edit['type']!r}"
        elif op == "define":
            t = tax.get(edit["type"])
            t.definition = str(edit["definition"])
            s.touched |= {i for i, label in s.labels.items() if t.name in label.types}
        elif op == "merge":
            names = list(edit["types"])
            if len(names) < 2:
                raise EditError("merge needs at least two types")
            parts = [tax.get(n) for n in names]
            into = edit.get("into") or names[0]
            if into not in names:
                into = _new_name(tax, into)
            merged = ErrorType(name=into, definition=edit.get("definition") or parts[0].definition,
                               examples=list(dict.fromkeys(e for p in parts for e in p.examples)),
                               provenance=f"edit: merge of {' + '.join(names)}")
            first = tax.types.index(parts[0])
            tax.types = [t for t in tax.types if t.name not in names]
            tax.types.insert(min(first, len(tax.types)), merged)
            _replace_in_labels(s.labels, set(names), into)
        elif op == "split":
            t = tax.get(edit["type"])
            ids = set(edit["ids"])
            missing = sorted(i for i in ids if t.name not in s.labels.get(i, Label(i)).types)
            if missing:
                raise EditError(f"split: {', '.join(missing)} do not carry {t.name!r}")
            new = _new_name(tax, edit["new"])
            tax.types.insert(tax.types.index(t) + 1, ErrorType(
                name=new, definition=edit.get("definition") or f"Split from {t.name}: {t.definition}",
                examples=sorted(ids)[:5], provenance=f"edit: split from {t.name!r}"))
            t.examples = [e for e in t.examples if e not in ids]
            _replace_in_labels(s.labels, {t.name}, new, ids)
        elif op == "move":
            label = s.labels.get(edit["id"])
            if label is None:
                raise EditError(f"move: no error step {edit['id']!r}")
            src, dst = tax.get(edit["from"]).name, tax.get(edit["to"]).name
            if src not in label.types:
                raise EditError(f"move: {edit['id']!r} does not carry {src!r}")
            label.types = list(dict.fromkeys([dst if t == src else t for t in label.types]))
        elif op == "long_tail":
            t = tax.get(edit["type"])
            if edit.get("value", True):
                t.status, t.pinned = "long_tail", True
            else:
                t.pinned = False
    except KeyError as e:
        raise EditError(f"{op}: {e.args[0] if e.args else e}") from None
    tax.edits = [*tax.edits, dict(edit)]
    return s


def apply_edits(taxonomy: Taxonomy, labels: list[Label], edits: list[dict[str, Any]],
                relabel: Relabel | None = None) -> tuple[Taxonomy, list[Label]]:
    """Replay an edit list (with undo) and re-label what the edits touched."""
    stack = [State(copy.deepcopy(taxonomy), {label.id: copy.deepcopy(label) for label in labels})]
    stack[0].taxonomy.edits = []
    for i, edit in enumerate(edits):
        if edit.get("op") == "undo":
            if len(stack) == 1:
                raise EditError(f"edit {i}: nothing to undo")
            stack.pop()
            continue
        try:
            stack.append(apply_edit(stack[-1], edit))
        except EditError as e:
            raise EditError(f"edit {i} ({edit.get('op')}): {e}") from None
    final = stack[-1]
    final.taxonomy.edits = [dict(e) for e in edits]
    if final.touched and relabel is not None:
        fresh = relabel(final.taxonomy, sorted(final.touched))
        for i, types in fresh.items():
            final.labels[i].types = list(types)
            final.labels[i].unassigned = None if types else "unclear"
    return final.taxonomy, list(final.labels.values())


class Curator:
    """An editing session over one taxonomy version: apply, undo, and the edit list so far."""

    def __init__(self, taxonomy: Taxonomy, labels: list[Label]):
        self.base, self.base_labels = taxonomy, labels
        self.edits: list[dict[str, Any]] = []
        self._states = [State(copy.deepcopy(taxonomy), {label.id: copy.deepcopy(label) for label in labels})]

    @property
    def taxonomy(self) -> Taxonomy:
        return self._states[-1].taxonomy

    @property
    def labels(self) -> list[Label]:
        return list(self._states[-1].labels.values())

    def apply(self, **edit: Any) -> Taxonomy:
        self._states.append(apply_edit(self._states[-1], edit))
        self.edits.append(edit)
        return self.taxonomy

    def undo(self) -> Taxonomy:
        if len(self._states) == 1:
            raise EditError("nothing to undo")
        self._states.pop()
        self.edits.append({"op": "undo"})
        return self.taxonomy
