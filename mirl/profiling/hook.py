"""The profiling hook: localizer before every step, teacher corrections for flagged ones.

The flag travels inside the trajectory (the correction's `meta["flag"]`, or the discarded step's),
so error steps are derived from finished trajectories only: a killed and resumed stage can never
record a flag twice or lose one.
"""

from __future__ import annotations

from mirl.agent.config import SUBMIT_MARKER
from mirl.agent.hooks import Discard, StepContext
from mirl.records.trajectory import Step
from mirl.roles.localizer import Localizer
from mirl.roles.teacher import Teacher


class ProfilingHook:
    def __init__(self, localizer: Localizer, teacher: Teacher, tries: int = 3, models: dict[str, str] | None = None):
        self.localizer, self.teacher, self.tries = localizer, teacher, tries
        self.models = models or {}

    def review(self, ctx: StepContext) -> Step | Discard:
        verdict = self.localizer.judge(ctx.task, ctx.steps, ctx.proposed)
        ctx.proposed.meta["localizer"] = {"verdict": verdict.verdict, "reason": verdict.reason, "source": verdict.source}
        if not verdict.bad:
            return ctx.proposed
        flag = {"step": len(ctx.steps), "rejected_command": ctx.proposed.command, "description": verdict.command_seen,
                "reason": verdict.reason, "source": verdict.source, "flags": verdict.flags, "attempts": []}
        episode = f"{ctx.task.id}#{ctx.seed}"
        rejected: list[tuple[Step, str]] = [(ctx.proposed, verdict.reason)]
        for _ in range(self.tries):
            candidate = self.teacher.correct(ctx.task, ctx.steps, rejected, episode)
            if candidate is None:  # the reference solution is used up: submitting is its last step
                candidate = Step(reasoning="The reference solution is complete; submitting.",
                                 command=f"echo {SUBMIT_MARKER}", source="teacher", meta={"exhausted": True})
                return self._accept(candidate, flag, "good", "reference solution complete", "teacher")
            check = self.localizer.judge(ctx.task, ctx.steps, candidate)
            flag["attempts"].append({"command": candidate.command, "verdict": check.verdict, "reason": check.reason,
                                     "source": check.source})
            if not check.bad:
                return self._accept(candidate, flag, check.verdict, check.reason, check.source)
            rejected.append((candidate, check.reason))
        flag["correction"] = None
        ctx.proposed.meta["flag"] = flag
        return Discard(f"teacher failed {self.tries} times to write a step the localizer accepts; "
                       f"last: {rejected[-1][1]}")

    @staticmethod
    def _accept(candidate: Step, flag: dict, verdict: str, reason: str, source: str) -> Step:
        flag["correction"] = candidate.command
        candidate.meta["flag"] = flag
        candidate.meta["localizer"] = {"verdict": verdict, "reason": reason, "source": source}
        return candidate


def flag_of(step: dict) -> dict | None:
    return (step.get("meta") or {}).get("flag")

