"""Taxonomy records: error types, the versioned taxonomy file, and the labels of each version.

    runs/<run>/taxonomy/versions/v001.yaml   types (name, definition, examples, provenance, status)
    runs/<run>/taxonomy/labels/v001.jsonl    one label per error step: the types it carries
Every edit writes a new version and keeps the old ones; later stages read the latest version (or
the one their params name) through `TaxonomyStore`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from mirl.jsonl import read_jsonl
from mirl.runner.layout import atomic_write, atomic_write_jsonl

TAXONOMY_SCHEMA = 1
UNASSIGNED = ("one_off", "new_pattern", "unclear")  # why an error step carries no type
Status = Literal["kept", "long_tail", "candidate"]


@dataclass
class ErrorType:
    name: str  # a behaviour in 2-5 words, never a tool or file
    definition: str  # checkable on one example by a yes/no question; says what the type is NOT
    examples: list[str] = field(default_factory=list)  # error-step ids that show it
    provenance: str = ""  # who made it: llm propose/refine, offline cluster, rules, or an edit
    status: Status = "candidate"  # kept (a misbehavior), long_tail, or not yet measured
    pinned: bool = False  # a person marked its status by hand: thresholds leave it alone


@dataclass
class Label:
    id: str  # the error step's id
    types: list[str] = field(default_factory=list)
    unassigned: str | None = None  # one_off | new_pattern | unclear when no type fits
    reason: str = ""


@dataclass
class Taxonomy:
    types: list[ErrorType]
    version: int = 0  # 0 until saved
    parent: int | None = None
    note: str = ""  # what made this version
    edits: list[dict[str, Any]] = field(default_factory=list)  # the edits that turned the parent into it
    threshold: float = 0.01  # the share of error steps a type needs to be kept
    schema: int = TAXONOMY_SCHEMA

    def names(self) -> list[str]:
        return [t.name for t in self.types]

    def get(self, name: str) -> ErrorType:
        for t in self.types:
            if t.name == name:
                return t
        raise KeyError(f"no type named {name!r}; types: {', '.join(self.names())}")

    def kept(self) -> list[ErrorType]:
        return [t for t in self.types if t.status == "kept"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Taxonomy:
        if int(d.get("schema", TAXONOMY_SCHEMA)) > TAXONOMY_SCHEMA:
            raise ValueError(f"taxonomy written by a newer mirl (schema {d.get('schema')})")
        types = [ErrorType(**{k: v for k, v in t.items() if k in ErrorType.__dataclass_fields__})
                 for t in d.get("types") or []]
        rest = {k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "types"}
        return cls(types=types, **rest)


def name_problems(name: str) -> list[str]:
    """What is wrong with a type name (empty: fine): 2-5 words, no file paths or command lines."""
    words = name.split()
    problems = []
    if not 2 <= len(words) <= 5:
        problems.append(f"type name {name!r} must have 2-5 words")
    if re.search(r"[/\\`$|;<>]|\.\w{1,4}\b", name):
        problems.append(f"type name {name!r} must name a behaviour, not a file, path or command")
    return problems


class TaxonomyStore:
    """The versions of one run's taxonomy and their label files; nothing is ever overwritten."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.versions_dir = self.root / "versions"
        self.labels_dir = self.root / "labels"

    def versions(self) -> list[int]:
        if not self.versions_dir.exists():
            return []
        return sorted(int(p.stem[1:]) for p in self.versions_dir.glob("v[0-9][0-9][0-9].yaml"))

    def latest(self) -> int | None:
        v = self.versions()
        return v[-1] if v else None

    def version_path(self, version: int) -> Path:
        return self.versions_dir / f"v{version:03d}.yaml"

    def labels_path(self, version: int) -> Path:
        return self.labels_dir / f"v{version:03d}.jsonl"

    def load(self, version: int | None = None) -> Taxonomy:
        version = self.latest() if version is None else version
        if version is None:
            raise FileNotFoundError(f"{self.versions_dir}: no taxonomy version yet (run the taxonomy stage)")
        path = self.version_path(version)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no taxonomy version {version}; versions: {self.versions()}")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ValueError(f"{path}: not valid YAML: {e}") from None
        types = data.get("types") if isinstance(data, dict) else None
        if not isinstance(types, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                                  for t in types):
            raise ValueError(f"{path}: a taxonomy version is a mapping whose 'types' is a list of types, "
                             f"each a mapping with a 'name'")
        try:
            return Taxonomy.from_dict(data)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from None

    def load_labels(self, version: int | None = None) -> list[Label]:
        version = self.latest() if version is None else version
        if version is None:
            return []
        path = self.labels_path(version)
        rows, report = read_jsonl(path)
        if report.bad_lines:
            raise ValueError(f"{path}: line {report.bad_lines[0]} is not a JSON object")
        for i, r in enumerate(rows, 1):
            types = r.get("types", [])
            if not isinstance(r.get("id"), str) or not isinstance(types, list) or not all(
                    isinstance(t, str) for t in types):
                raise ValueError(f"{path}: label {i} needs a string 'id' and a list of type names as 'types'")
        return [Label(**{k: r[k] for k in Label.__dataclass_fields__ if k in r}) for r in rows]

    def save(self, taxonomy: Taxonomy, labels: list[Label]) -> int:
        """Write `taxonomy` and its labels as the next version; returns the version number."""
        version = (self.latest() or 0) + 1
        taxonomy.version = version
        # labels first: a version file is only there once its labels are
        atomic_write_jsonl(self.labels_path(version), [asdict(label) for label in labels])
        atomic_write(self.version_path(version),
                     yaml.safe_dump(taxonomy.to_dict(), sort_keys=False, allow_unicode=True, width=100))
        return version
