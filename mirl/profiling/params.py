"""Parameters of the profiling stage (notebook 01, section `profiling` of a params YAML).

Models (policy, localizer, teacher), the sandbox and the agent's limits are the shared sections
`models`, `sandbox` and `agent` of the same file (see `mirl.params`); this section holds only what
is the profiling stage's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class ProfilingParams:
    """Flat on purpose: these are the literals of notebook 01's parameters cell."""

    tasks: str = field(default="tasks", metadata={
        "help": "task pool: a directory of tasks, or comma-separated task dirs; `!<task id>` leaves one out"})
    max_tasks: int = field(default=0, metadata={"min": 0, "help": "use only N tasks of the pool (task_order says which); 0 = all"})
    task_order: Literal["sorted", "random"] = field(default="sorted", metadata={
        "help": "with max_tasks: the first N by id (sorted), or N drawn at random, seeded by task_seed (random: the "
                "paper's 2,017 random environments of TMax's set)"})
    task_seed: int = field(default=0, metadata={"help": "seed of the random task draw (task_order random)"})
    seeds: int = field(default=2, metadata={"min": 1, "help": "rollout seeds per environment (paper: 2)"})
    workers: int = field(default=2, metadata={"min": 1, "help": "episodes run in parallel"})
    ray_address: str = field(default="", metadata={"help": "run episodes on this Ray cluster instead of local workers"})
    localizer: Literal["rules", "llm", "both"] = field(default="rules", metadata={
        "help": "error localizer: rule detectors, the models.localizer LLM, or both (flag if either flags)"})
    teacher: Literal["reference", "llm"] = field(default="reference", metadata={
        "help": "teacher: replay the task's reference solution, or the models.teacher LLM"})
    teacher_tries: int = field(default=3, metadata={"min": 1, "help": "failed corrections before the rollout is discarded (paper: 3)"})
    budget_usd: float = field(default=0.0, metadata={"min": 0, "help": "stop the stage cleanly once its LLM spend reaches this; 0 = no cap"})
    examples: int = field(default=8, metadata={"min": 0, "help": "flagged steps shown in the notebook"})
