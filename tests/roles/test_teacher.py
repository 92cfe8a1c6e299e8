"""The LLM teacher's input is the prefix only (the paper's Table 1): the policy's rejected step and the
localizer's reason never reach it; on a retry it sees its own rejected corrections."""

from __future__ import annotations

from mirl.records.trajectory import Step
from mirl.roles.teacher import LLMTeacher
from tests.agent.agent_doubles import make_task


def test_the_teacher_sees_the_prefix_and_never_the_policys_rejected_step(tmp_path):
    task = make_task(tmp_path)
    history = [Step(reasoning="look", command="ls /app", output="data.txt\n", exit_code=0)]
    policy = Step(reasoning="guess", command="rm -rf /app/secret-policy-step", raw="rm -rf /app/secret-policy-step")
    first = LLMTeacher(client=None).messages(task, history, [(policy, "deletes the data: policy-reason")])
    text = "\n".join(m["content"] for m in first)
    assert "ls /app" in text and "data.txt" in text and task.instruction in text
    assert "secret-policy-step" not in text and "policy-reason" not in text
    own = Step(reasoning="try", command="cat /app/teacher-try", raw="cat /app/teacher-try")
    retry = LLMTeacher(client=None).messages(task, history, [(policy, "policy-reason"), (own, "teacher-reason")])
    text = "\n".join(m["content"] for m in retry)
    assert "teacher-try" in text and "teacher-reason" in text and "secret-policy-step" not in text
