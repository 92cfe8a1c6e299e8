"""Error localizers: judge one proposed step given everything the agent saw before it.

Three interchangeable judges behind one Protocol: the rule detectors (deterministic, free), an
LLM (the paper's localizer), or both (a step is bad if either says so; each flag keeps its source).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from mirl.records.trajectory import Step, Trajectory
from mirl.roles import prompts
from mirl.tasks import Task

LOCALIZER_SCHEMA = {
    "type": "object",
    "required": ["command_seen", "reason", "verdict"],
    "properties": {
        "command_seen": {"type": "string"},
        "reason": {"type": "string"},
        "verdict": {"type": "string", "enum": ["good", "bad"]},
    },
}


@dataclass
class Verdict:
    verdict: str  # "good" | "bad"
    reason: str
    command_seen: str = ""
    source: str = ""  # "rules:<detector>" or "llm:<model>"
    flags: list[dict[str, Any]] = field(default_factory=list)  # every flag when several judges spoke

    @property
    def bad(self) -> bool:
        return self.verdict == "bad"


class Localizer(Protocol):
    def judge(self, task: Task, history: list[Step], proposed: Step) -> Verdict: ...


class RuleLocalizer:
    """The rule detectors applied to history + the proposed step (which has no output yet)."""

    def __init__(self, detectors: list[str] | None = None):
        from mirl.detectors import get_detectors

        self.detectors = get_detectors(detectors)

    def judge(self, task: Task, history: list[Step], proposed: Step) -> Verdict:
        from mirl.detectors import run_detectors

        pending = Step(reasoning=proposed.reasoning, command=proposed.command, output="", exit_code=None,
                       source=proposed.source)
        traj = Trajectory(task=task.id, seed=0, models={}, steps=[*history, pending])
        index = len(history)
        hits = [f for f in run_detectors(traj, self.detectors) if f.step == index]
        if not hits:
            return Verdict("good", "no rule detector fired", _describe(proposed), "rules")
        first = hits[0]
        return Verdict("bad", first.evidence, _describe(proposed), f"rules:{first.detector}",
                       flags=[{"source": f"rules:{h.detector}", "reason": h.evidence} for h in hits])


class LLMLocalizer:
    """The paper's localizer: an LLM sees the agent's view plus the step, answers JSON."""

    def __init__(self, client: Any, role: str = "localizer"):
        self.client, self.role = client, role

    def messages(self, task: Task, history: list[Step], proposed: Step) -> list[dict[str, str]]:
        user = prompts.LOCALIZER_USER.format(instruction=task.instruction.strip(),
                                             history=prompts.render_history(history),
                                             proposed=prompts.render_proposed(proposed))
        return [{"role": "system", "content": prompts.LOCALIZER_SYSTEM}, {"role": "user", "content": user}]

    def judge(self, task: Task, history: list[Step], proposed: Step) -> Verdict:
        data = self.client.complete_json(self.role, self.messages(task, history, proposed), LOCALIZER_SCHEMA)
        return Verdict(data["verdict"], data["reason"], data["command_seen"], f"llm:{self.client.config.role(self.role).model}")


class EitherLocalizer:
    """Bad if any judge says bad; the verdict keeps every judge's flag with its source."""

    def __init__(self, judges: list[Localizer]):
        self.judges = judges

    def judge(self, task: Task, history: list[Step], proposed: Step) -> Verdict:
        verdicts = [j.judge(task, history, proposed) for j in self.judges]
        bad = [v for v in verdicts if v.bad]
        if not bad:
            return verdicts[-1]
        flags = [f for v in bad for f in (v.flags or [{"source": v.source, "reason": v.reason}])]
        first = bad[0]
        return Verdict("bad", first.reason, first.command_seen or verdicts[-1].command_seen,
                       "+".join(v.source for v in bad), flags=flags)


def _describe(step: Step) -> str:
    if step.command is None:
        return "no runnable command"
    line = step.command.strip().splitlines()[0] if step.command.strip() else ""
    return line[:120]
