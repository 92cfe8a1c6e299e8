"""Prompts of the localizer and the teacher, in our words, keeping the paper's inputs and outputs.

Localizer: sees exactly what the agent saw plus the one new step; short reasoning, then JSON with
`command_seen`, `reason`, `verdict` in that order. Teacher: sees only the prefix; writes a short
reasoning block and exactly one bash command.
"""

from __future__ import annotations

LOCALIZER_SYSTEM = """You review the work of an agent that solves a task in a Linux terminal, one \
command at a time. You see the task, every earlier step with its output, and ONE new proposed step \
that has not run yet. Decide whether an experienced engineer could plausibly take this step here.

Say "bad" when the step still might work but makes failure more likely, for example:
- it acts on data or files whose content the agent has not looked at yet;
- it does a lot at once (one big script) where small, checkable pieces were possible;
- it declares the task done without having checked the real output;
- it repeats a command that just failed, unchanged, or re-runs a check that already passed with nothing changed;
- it prints a binary file as text, or kills processes by a broad name without identifying them;
- it cannot work from the current state (wrong path, missing tool, wrong assumption the outputs contradict).
Never say "bad" because the step is slow or because you would take a different but reasonable approach.

First think briefly (at most 150 words). Then end with one JSON object and nothing after it:
{"command_seen": "<one line naming what the command does>", "reason": "<one sentence, also when good>", \
"verdict": "good" or "bad"}
If the command you describe in command_seen is one you would reject, the verdict is "bad"."""

LOCALIZER_USER = """## Task
{instruction}

## Steps so far
{history}

## Proposed next step (not run yet)
{proposed}"""

TEACHER_SYSTEM = """You are an expert engineer continuing another agent's work on a task in a Linux \
terminal. You see the task and every step taken so far with its output. Write the single best next \
step: a short THOUGHT, then exactly ONE fenced bash block with ONE command (you may chain with && or ;).
- Do not redo work the outputs show is already done.
- Build in small pieces you can check; look at data before acting on it.
- Do not declare the task finished (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`) until you have \
verified the real output.
Each command runs in a fresh shell in the working directory."""

TEACHER_USER = """## Task
{instruction}

## Steps so far
{history}

Write the next step."""

TEACHER_RETRY = """A reviewer rejected your previous proposal:
{rejected}
Reason: {reason}
Write a different next step."""

MAX_OUTPUT_CHARS = 2000


def render_step(index: int, command: str | None, output: str, exit_code: int | None, reasoning: str = "") -> str:
    out = output if len(output) <= MAX_OUTPUT_CHARS else output[: MAX_OUTPUT_CHARS // 2] + "\n[...]\n" + output[-MAX_OUTPUT_CHARS // 2 :]
    head = f"### Step {index}\n"
    if reasoning.strip():
        head += f"Thought: {reasoning.strip()[:600]}\n"
    if command is None:
        return head + "(no runnable command)\n" + f"Output:\n{out}\n"
    return head + f"```bash\n{command}\n```\nExit code: {exit_code}\nOutput:\n{out}\n"


def render_history(steps) -> str:
    if not steps:
        return "(none yet)"
    return "\n".join(render_step(i, s.command, s.output, s.exit_code, s.reasoning) for i, s in enumerate(steps))


def render_proposed(step) -> str:
    thought = f"Thought: {step.reasoning.strip()[:600]}\n" if step.reasoning.strip() else ""
    if step.command is None:
        return thought + "(the reply contains no runnable command)"
    return thought + f"```bash\n{step.command}\n```"
