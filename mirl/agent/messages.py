"""Chat messages rebuilt from steps: the single definition of what the agent has seen.

The harness never keeps a separate message list: the prompt for step k is a pure function of the
instruction and steps 0..k-1. So an episode started from a recorded prefix sees exactly what the
original agent saw, and a trainer can rebuild any step's context from the stored trajectory.
A malformed reply stays in the history followed by the format-error message (mini-swe-agent 1.x).
"""

from __future__ import annotations

import json
from typing import Any

from mirl.agent import prompts
from mirl.agent.parse import TEXT_TOOL_CALL
from mirl.records.trajectory import Step

Message = dict[str, Any]


def assistant_text(step: Step, action_format: str = "text") -> str:
    """The reply as the model wrote it, or a canonical one for steps without it (teacher, imports).
    In tool mode it is the text an in-process policy writes its calls in (`<tool_call>` blocks, which
    `parse_tool` reads): a hosted model's reply keeps its calls apart from its text."""
    if action_format == "tool":
        return _tool_text(step)
    if step.raw:
        return step.raw
    if step.command is None:
        return step.reasoning
    thought = f"THOUGHT: {step.reasoning}\n\n" if step.reasoning else ""
    return f"{thought}```bash\n{step.command}\n```"


def _tool_text(step: Step) -> str:
    if step.raw and TEXT_TOOL_CALL.search(step.raw):
        return step.raw
    calls = tool_calls(step, 0)
    text = step.raw or step.reasoning or ""
    if not calls:
        return text
    blocks = []
    for c in calls:
        fn = c.get("function") or {}
        args = fn.get("arguments", {})
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            pass  # kept as the string it was
        blocks.append("<tool_call>\n" + json.dumps({"name": fn.get("name", ""), "arguments": args}) + "\n</tool_call>")
    return "\n".join(([text.strip()] if text.strip() else []) + blocks)


def tool_calls(step: Step, index: int) -> list[dict[str, Any]]:
    """The tool calls of a step: as recorded, or one synthesised `bash` call with a stable id."""
    recorded = step.meta.get("tool_calls")
    if recorded:
        return recorded
    if step.command is None:
        return []
    return [{"id": f"call_{index}", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": step.command})}}]


def observation_text(step: Step, action_format: str) -> str:
    if step.command is None:
        return step.output or prompts.format_error(action_format, "none")
    return prompts.observation(step.output, step.exit_code, step.timed_out)


def step_messages(step: Step, index: int, action_format: str) -> list[Message]:
    if action_format != "tool":
        return [{"role": "assistant", "content": assistant_text(step)},
                {"role": "user", "content": observation_text(step, action_format)}]
    calls = tool_calls(step, index)
    content = step.raw if step.raw or step.meta.get("tool_calls") else step.reasoning
    out: list[Message] = [{"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}]
    obs = observation_text(step, action_format)
    if calls:  # every call needs an answer, even rejected ones, or chat APIs refuse the history
        out += [{"role": "tool", "tool_call_id": c.get("id", f"call_{index}"), "content": obs} for c in calls]
    else:
        out.append({"role": "user", "content": obs})
    return out


def build_messages(instruction: str, steps: list[Step], action_format: str = "text",
                   system_template: str = "", instance_template: str = "") -> list[Message]:
    messages: list[Message] = [
        {"role": "system", "content": prompts.system_prompt(action_format, system_template)},
        {"role": "user", "content": prompts.instance_prompt(instruction, instance_template)},
    ]
    for i, step in enumerate(steps):
        messages += step_messages(step, i, action_format)
    return messages


def message_chars(messages: list[Message]) -> int:
    n = 0
    for m in messages:
        n += len(m.get("content") or "")
        for c in m.get("tool_calls") or ():
            n += len(str((c.get("function") or {}).get("arguments", "")))
    return n
