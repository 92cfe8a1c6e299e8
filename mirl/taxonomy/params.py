"""Parameters of the taxonomy stage (notebook 02, section `taxonomy` of a params YAML).

The annotator LLM is `models.annotator` in the shared `models` section.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class TaxonomyParams:
    """Flat on purpose: these are the literals of notebook 02's parameters cell."""

    annotator: Literal["offline", "rules", "llm"] = field(default="offline", metadata={
        "help": "offline: embedding clusters + rule labels (no LLM); rules: the rule labels alone; llm: the "
                "models.annotator LLM proposes, refines and labels"})
    error_steps: str = field(default="", metadata={
        "help": "an error_steps.jsonl made elsewhere (e.g. from your own agent logs); empty: this run's profiling"})
    batch_size: int = field(default=40, metadata={"min": 1, "help": "error steps per propose/refine batch"})
    refine_batches: int = field(default=5, metadata={"min": 0, "help": "most refine batches after the propose batch"})
    recur_batches: int = field(default=2, metadata={"min": 1,
        "help": "LLM annotator: keep a candidate type only when it appears (proposed, or assigned an example) in at "
                "least this many of the propose/refine batches, i.e. it recurs across batches (paper section 3.3); "
                "1 keeps every proposed type"})
    new_pattern_stop: float = field(default=0.1, metadata={"min": 0, "max": 1,
        "help": "stop refining once the share of a batch left as new_pattern falls under this"})
    label_batch_size: int = field(default=20, metadata={"min": 1, "help": "error steps per labelling call"})
    threshold: float = field(default=0.01, metadata={"min": 0, "max": 1,
        "help": "share of error steps a type needs to be kept as a misbehavior (paper: 1%)"})
    seed: int = field(default=0, metadata={"help": "seed of the batch order and of the clustering"})
    max_command_chars: int = field(default=300, metadata={"min": 1, "help": "rejected commands longer than this are cut"})
    max_clusters: int = field(default=12, metadata={"min": 1, "help": "offline annotator: the most clusters tried"})
    edits: str = field(default="", metadata={
        "help": "a YAML edit list (rename, define, merge, split, move, long_tail, undo) applied after labelling, "
                "as a new taxonomy version"})
    workers: int = field(default=2, metadata={"min": 1, "help": "labelling calls in parallel"})
    budget_usd: float = field(default=0.0, metadata={"min": 0, "help": "stop the stage cleanly once its LLM spend reaches this; 0 = no cap"})
    examples: int = field(default=3, metadata={"min": 0, "help": "examples shown per kept type in the notebook"})

