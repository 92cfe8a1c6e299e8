"""What the agent is told: system prompt, task message, observations and format errors.

Worded after mini-swe-agent's conventions (a THOUGHT then one command; `<returncode>` and
`<output>` tags; the submit marker), because policies trained on those transcripts expect them.
Templates use `str.format` fields so a params file can replace them without a template engine.
"""

from __future__ import annotations

from mirl.agent.config import SUBMIT_MARKER

SYSTEM_TEXT = """You are an agent working in a Linux terminal to complete a task.

Every reply has two parts: a short THOUGHT explaining what you will do and why, then exactly ONE \
fenced bash block holding ONE command (several commands may be joined with && or ||).

<format_example>
THOUGHT: I should first see which files are here.

```bash
ls -la
```
</format_example>

Replies without exactly one bash block are rejected and nothing runs."""

SYSTEM_TOOL = """You are an agent working in a Linux terminal to complete a task.

Every reply has two parts: a short THOUGHT explaining what you will do and why, then exactly ONE call \
of the `bash` tool with ONE command (several commands may be joined with && or ||).

Replies without exactly one bash tool call are rejected and nothing runs."""

INSTANCE = """Please complete this task:

{instruction}

Rules:
1. Each command runs in a fresh shell: `cd` and `export` do not carry over; files and background \
processes do. Prefix a command with `cd /some/dir && ...` when needed.
2. Commands must not be interactive (no editors or pagers waiting for input).
3. When you are done, run exactly `echo {marker}` on its own. You cannot continue after that."""

OBSERVATION = "<returncode>{returncode}</returncode>\n<output>\n{output}</output>"
OBSERVATION_TIMEOUT = (
    "<returncode>{returncode}</returncode>\n<warning>The command timed out and was killed.</warning>\n"
    "<output>\n{output}</output>"
)

FORMAT_ERROR_TEXT = """Format error: expected exactly one ```bash block, found {found}.

Reply with a short THOUGHT followed by exactly ONE fenced block:

```bash
<command>
```

If you have finished the task, run `echo {marker}` on its own."""

FORMAT_ERROR_TOOL = """Format error: expected exactly one call of the `bash` tool with a `command` argument, \
found {found}.

Reply with a short THOUGHT and exactly ONE `bash` tool call. If you have finished the task, \
call it with `echo {marker}`."""

BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command in a fresh shell and return its output",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the bash command to run"}},
            "required": ["command"],
        },
    },
}


def system_prompt(action_format: str, template: str = "") -> str:
    if template:
        return template.format(marker=SUBMIT_MARKER)
    return SYSTEM_TOOL if action_format == "tool" else SYSTEM_TEXT


def instance_prompt(instruction: str, template: str = "") -> str:
    return (template or INSTANCE).format(instruction=instruction.strip(), marker=SUBMIT_MARKER)


def observation(output: str, exit_code: int | None, timed_out: bool = False) -> str:
    text = output if (not output or output.endswith("\n")) else output + "\n"
    return (OBSERVATION_TIMEOUT if timed_out else OBSERVATION).format(returncode=exit_code, output=text)


def format_error(action_format: str, found: str) -> str:
    return (FORMAT_ERROR_TOOL if action_format == "tool" else FORMAT_ERROR_TEXT).format(
        found=found, marker=SUBMIT_MARKER)
