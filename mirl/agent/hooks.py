"""The seam between "step proposed" and "step executed".

Error profiling puts the localizer and the teacher here: the hook sees everything the agent saw
plus the proposed step, and returns the step to run (the same one, or a replacement with
`source="teacher"`), or `Discard(reason)` to drop the episode (e.g. the teacher failed 3 times).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from mirl.agent.config import AgentConfig
from mirl.records.trajectory import Step
from mirl.tasks import Task


@dataclass
class StepContext:
    task: Task
    seed: int
    messages: list[dict[str, Any]]  # the prompt the policy answered with `proposed`
    steps: list[Step]  # the steps so far, restored prefix included; `proposed` is not among them
    proposed: Step
    config: AgentConfig


@dataclass
class Discard:
    """Returned by a hook to end the episode unverified; recorded as exit_reason="discarded"."""

    reason: str


@runtime_checkable
class StepHook(Protocol):
    """Reviews each proposed step before it runs. A hook may set `models` (role -> name) for the record."""

    def review(self, ctx: StepContext) -> Step | Discard: ...
