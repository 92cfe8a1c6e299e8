"""Parameters of the prefix stage (notebook 03, section `prefixes` of a params YAML)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class PrefixParams:
    """Flat on purpose: these are the literals of notebook 03's parameters cell."""

    per_misbehavior: int = field(default=80, metadata={"min": 0, "help": "training prefixes sampled per misbehavior (paper: 80)"})
    heldout_per_misbehavior: int = field(default=20, metadata={"min": 0,
        "help": "held-out prefixes kept per misbehavior for the misbehavior-rate evaluation (paper: 20 unseen): "
                "candidates no training prefix uses are rerun-checked in waves until this many pass or none is left"})
    seed: int = field(default=0, metadata={"help": "seed of the sampling"})
    taxonomy_version: int = field(default=0, metadata={"min": 0, "help": "taxonomy version whose kept types are the misbehaviors; 0 = latest"})
    keep: Literal["exact", "normalized", "snapshot"] = field(default="exact", metadata={
        "help": "which check a prefix must pass to be a training start (paper: exact rerun)"})
    snapshot: bool = field(default=True, metadata={
        "help": "also save the sandbox state after each reproduced prefix and check that restoring it reproduces the next output"})
    verify: bool = field(default=False, metadata={
        "help": "also run the task's tests at each reproduced prefix's state: whether they pass before the policy acts "
                "(where they do, r_o from that start is 1 unless the policy breaks the state, so a group's reward "
                "is r_e alone; not the paper's, a diagnostic; part of the stage's params, so set it before a run: "
                "on an existing run stage 03 and those after it rerun with --force)"})
    workers: int = field(default=4, metadata={"min": 1, "help": "prefixes checked in parallel"})
