"""The prefix record: a training (or held-out) start at a misbehavior, and how well it restores.

A prefix is the trajectory of an error step up to, not including, that step; the trajectory holds
its commands, outputs and token ids, so the record only points at it (`trajectory`: task, seed,
steps). Written by the prefix stage to `runs/<run>/prefixes/prefixes.jsonl`; read by training and
evaluation through `mirl.runner.inputs.load_prefixes`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

PREFIX_SCHEMA = 1
MODES = ("exact", "normalized", "snapshot")


@dataclass
class Prefix:
    id: str  # "<misbehavior>|<error step id>"
    misbehavior: str
    error_id: str  # the error step this prefix leads to (env/seed/step)
    env: str
    seed: int
    steps: int  # how many trajectory steps the prefix holds
    split: Literal["train", "heldout"] = "train"
    verdict: dict[str, bool | None] = field(default_factory=dict)  # mode -> kept (None: not checked)
    masks: list[str] = field(default_factory=list)  # the masks normalized mode needed
    divergence: dict[str, Any] | None = None  # first step that did not reproduce: step, kind, diff
    restore: dict[str, Any] = field(default_factory=dict)  # rerun_s, snapshot handle and restore_s, ...
    error: str | None = None  # the check itself failed (sandbox could not start, ...)
    passes: bool | None = None  # with prefixes.verify: the task's tests pass at the prefix's state (None: not run)
    schema: int = PREFIX_SCHEMA

    @property
    def trajectory(self) -> dict[str, Any]:
        return {"task": self.env, "seed": self.seed, "steps": self.steps}

    def kept(self, mode: str) -> bool:
        return bool(self.verdict.get(mode))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Prefix:
        if int(d.get("schema", PREFIX_SCHEMA)) > PREFIX_SCHEMA:
            raise ValueError(f"prefix written by a newer mirl (schema {d.get('schema')})")
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
