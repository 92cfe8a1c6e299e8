"""Turn a model reply into (reasoning, command), or say why there is no runnable command.

A reply must hold exactly one action. Zero or several give `command=None` plus the reason, which
the harness shows the agent as the next observation: that is how mini-swe-agent behaves, and the
malformed steps are kept as data.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

# ```bash (mini-swe-agent 1.x) and ```mswea_bash_command (2.x text mode) are both accepted
BASH_BLOCK = re.compile(r"```(?:bash|mswea_bash_command)[ \t]*\n(.*?)```", re.DOTALL)
# chat templates of in-process models (Qwen/Hermes style) write tool calls as text
TEXT_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass
class Parsed:
    reasoning: str
    command: str | None
    error: str | None = None  # why there is no command: "0 blocks", "2 blocks", "unknown tool 'x'"...
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # as the model sent them (tool mode)


def parse_text(reply: str) -> Parsed:
    blocks = BASH_BLOCK.findall(reply or "")
    reasoning = BASH_BLOCK.sub("", reply or "").strip()
    if len(blocks) != 1:
        return Parsed(reasoning, None, f"{len(blocks)} bash blocks")
    return Parsed(reasoning, blocks[0].strip("\n").strip())


def _call_parts(call: dict[str, Any]) -> tuple[str, Any]:
    fn = call.get("function") or {}
    return str(fn.get("name", call.get("name", ""))), fn.get("arguments", call.get("arguments"))


def _text_tool_calls(reply: str) -> list[dict[str, Any]]:
    calls = []
    for body in TEXT_TOOL_CALL.findall(reply or ""):
        try:
            obj = json.loads(body)
        except ValueError:
            obj = {"name": "", "arguments": body}
        if not isinstance(obj, dict):
            obj = {"name": "", "arguments": body}
        args = obj.get("arguments", obj.get("parameters", {}))
        calls.append({
            "id": f"call_{uuid.uuid4().hex[:12]}",
            "type": "function",
            "function": {"name": str(obj.get("name", "")),
                         "arguments": args if isinstance(args, str) else json.dumps(args)},
        })
    return calls


def parse_tool(reply: str, tool_calls: list[dict[str, Any]] | None) -> Parsed:
    calls = list(tool_calls or [])
    text = reply or ""
    if not calls and TEXT_TOOL_CALL.search(text):
        calls = _text_tool_calls(text)
        text = TEXT_TOOL_CALL.sub("", text)
    reasoning = text.strip()
    if len(calls) != 1:
        return Parsed(reasoning, None, f"{len(calls)} tool calls", calls)
    name, args = _call_parts(calls[0])
    if name != "bash":
        return Parsed(reasoning, None, f"a call of unknown tool {name!r}", calls)
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return Parsed(reasoning, None, "a bash call whose arguments are not JSON", calls)
    if not isinstance(args, dict) or not isinstance(args.get("command"), str):
        return Parsed(reasoning, None, "a bash call without a string `command` argument", calls)
    return Parsed(reasoning, args["command"], None, calls)


# argument keys that hold a shell command in tools of other harnesses (Terminus keystrokes, OpenHands cmd...)
SHELL_KEYS = ("command", "cmd", "keystrokes", "script", "bash_command", "shell_command", "commands")
# file-editor tools (OpenHands and SWE-agent `str_replace_editor`, Anthropic's text editor) name their
# subcommand `command` too: `{"command": "create", "path": ...}` runs no shell command `create`
EDITOR_COMMANDS = frozenset({"view", "create", "str_replace", "insert", "undo_edit"})


def shell_command(args: dict[str, Any]) -> str | None:
    """The shell command in a tool call's arguments, whatever the tool is called; None for none."""
    if args.get("command") in EDITOR_COMMANDS and "path" in args:
        return None  # an editor's subcommand, not a shell command
    for key in SHELL_KEYS:
        value = args.get(key)
        if isinstance(value, str):
            return value[:-1] if value.endswith("\n") and key == "keystrokes" else value
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return "\n".join(value)
    return None


def parse_reply(action_format: str, reply: str, tool_calls: list[dict[str, Any]] | None = None) -> Parsed:
    if action_format == "tool":
        return parse_tool(reply, tool_calls)
    return parse_text(reply)
