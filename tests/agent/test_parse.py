import json

from agent_doubles import tool_call

from mirl.agent.parse import parse_reply, parse_text, parse_tool


def test_text_one_block():
    p = parse_text("THOUGHT: look around.\n\n```bash\nls -la /app\n```\n")
    assert p.command == "ls -la /app"
    assert p.reasoning == "THOUGHT: look around."
    assert p.error is None


def test_text_accepts_mini_swe_agent_2_fence_and_multiline():
    p = parse_text("ok\n```mswea_bash_command\ncat <<'EOF' > a\nx\nEOF\n```")
    assert p.command == "cat <<'EOF' > a\nx\nEOF"


def test_text_zero_and_several_blocks_have_no_command():
    zero = parse_text("I think I am done.")
    assert zero.command is None and zero.error == "0 bash blocks" and zero.reasoning == "I think I am done."
    two = parse_text("```bash\nls\n```\nand\n```bash\npwd\n```")
    assert two.command is None and two.error == "2 bash blocks"


def test_text_other_languages_are_not_commands():
    p = parse_text("```python\nprint(1)\n```")
    assert p.command is None and p.error == "0 bash blocks"


def test_tool_one_call():
    p = parse_tool("Let me list.", [tool_call("ls")])
    assert p.command == "ls" and p.reasoning == "Let me list." and p.tool_calls[0]["id"] == "call_a"


def test_tool_zero_several_unknown_bad_args():
    assert parse_tool("no call", []).error == "0 tool calls"
    assert parse_tool("", [tool_call("ls", "a"), tool_call("pwd", "b")]).error == "2 tool calls"
    assert "unknown tool 'python'" in parse_tool("", [tool_call("x", name="python")]).error
    bad = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{not json"}}
    assert (parse_tool("", [bad]).command, parse_tool("", [bad]).error) == (None, "a bash call whose arguments are not JSON")
    missing = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": "ls"})}}
    assert parse_tool("", [missing]).error == "a bash call without a string `command` argument"


def test_tool_calls_written_as_text_by_chat_templates():
    reply = 'Listing.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls /"}}\n</tool_call>'
    p = parse_reply("tool", reply, [])
    assert p.command == "ls /" and p.reasoning == "Listing."
    assert json.loads(p.tool_calls[0]["function"]["arguments"]) == {"command": "ls /"}
