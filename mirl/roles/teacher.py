"""Teachers: write a corrected step from the same prefix the rejected step came from.

`ReferenceTeacherAdapter` replays the task's reference solution (the embedded default); `LLMTeacher`
asks the teacher LLM with the paper's inputs (only the prefix) and, on a retry, what was rejected.
"""

from __future__ import annotations

from typing import Any, Protocol

from mirl.agent.parse import parse_reply
from mirl.records.trajectory import Step
from mirl.roles import prompts
from mirl.tasks import Task


class Teacher(Protocol):
    def correct(self, task: Task, history: list[Step], rejected: list[tuple[Step, str]], episode: str) -> Step | None:
        """A replacement step, or None when the teacher has nothing to offer (then the agent submits)."""


class ReferenceTeacherAdapter:
    def __init__(self):
        from mirl.roles.reference_teacher import ReferenceTeacher

        self.inner = ReferenceTeacher()

    def correct(self, task, history, rejected, episode):
        return self.inner.propose(task, history, episode=episode)


class LLMTeacher:
    def __init__(self, client: Any, action_format: str = "text", role: str = "teacher"):
        self.client, self.action_format, self.role = client, action_format, role

    def messages(self, task: Task, history: list[Step], rejected: list[tuple[Step, str]]) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": prompts.TEACHER_SYSTEM},
                {"role": "user", "content": prompts.TEACHER_USER.format(
                    instruction=task.instruction.strip(), history=prompts.render_history(history))}]
        for step, reason in rejected[1:]:  # the policy's own rejected step is not shown: the teacher sees only the prefix
            msgs.append({"role": "assistant", "content": step.raw or prompts.render_proposed(step)})
            msgs.append({"role": "user", "content": prompts.TEACHER_RETRY.format(
                rejected=prompts.render_proposed(step), reason=reason)})
        return msgs

    def correct(self, task, history, rejected, episode):
        [c] = self.client.complete(self.role, self.messages(task, history, rejected), n=1,
                                   sample_offset=len(rejected) - 1)
        parsed = parse_reply("text", c.text, c.tool_calls)
        return Step(reasoning=parsed.reasoning, command=parsed.command, raw=c.text, source="teacher",
                    input_tokens=c.input_tokens, output_tokens=c.output_tokens,
                    meta={"format_error": parsed.error} if parsed.error else {})
