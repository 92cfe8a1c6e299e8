import json
from dataclasses import asdict
from pathlib import Path

import pytest
from agent_doubles import SUBMIT, FakeSandbox, Scripted, bash, tool_call

from mirl.agent import AgentConfig, run_episode
from mirl.agent.miniswe import FORMAT, TrajFormatError, from_traj_json, load_traj_json, save_traj_json, to_traj_json
from mirl.records import Step, Trajectory
from mirl.records.trajectory import load_trajectories
from mirl.sandbox.base import CommandResult
from mirl.sources import read_source as read_trajectories


def _played(task, action_format):
    if action_format == "text":
        replies = [bash("ls /app"), "no block", bash("false"), SUBMIT]
    else:
        replies = [("Listing.", [tool_call("ls /app", "c1")]), ("", [tool_call("a", "x"), tool_call("b", "y")]),
                   ("", []), ("", [tool_call("false", "c4")]),
                   ("done", [tool_call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "c5")])]

    def respond(cmd):
        if cmd == "false":
            return CommandResult("", 1, 0.01)
        if cmd.startswith("echo"):
            return CommandResult(cmd[5:] + "\n", 0, 0.002)
        return CommandResult("hello.txt\n", 0, 0.003, timed_out=False)

    return run_episode(task, FakeSandbox(respond=respond), Scripted(replies, name="m/policy"),
                       AgentConfig(action_format=action_format), seed=1)


@pytest.mark.parametrize("action_format", ["text", "tool"])
def test_round_trip_is_lossless(task, tmp_path, action_format):
    traj = _played(task, action_format)
    traj.steps[0].meta["localizer"] = {"verdict": "good"}
    path = save_traj_json(traj, tmp_path / "t1.traj.json")
    data = json.loads(path.read_text())
    assert data["trajectory_format"] == FORMAT
    assert data["info"]["exit_status"] == "Submitted"
    assert data["messages"][-1]["role"] == "exit"
    back = load_traj_json(path)
    assert back.to_dict() == traj.to_dict()


def test_text_layout_matches_mini_swe_agent(task):
    data = to_traj_json(_played(task, "text"))
    roles = [m["role"] for m in data["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user",
                     "assistant", "user", "exit"]
    first = data["messages"][2]
    assert "```bash\nls /app\n```" in first["content"] and first["extra"]["actions"] == [{"command": "ls /app"}]
    obs = data["messages"][3]
    assert obs["extra"]["raw_output"] == "hello.txt\n" and obs["extra"]["returncode"] == 0
    assert data["messages"][5]["extra"]["interrupt_type"] == "FormatError"
    assert set(data["info"]) >= {"model_stats", "config", "mini_version", "exit_status", "submission"}


def test_tool_layout_matches_mini_swe_agent(task):
    data = to_traj_json(_played(task, "tool"))
    msgs = data["messages"]
    assert msgs[2]["tool_calls"][0]["id"] == "c1"
    assert msgs[2]["extra"]["actions"] == [{"command": "ls /app", "tool_call_id": "c1"}]
    assert msgs[3]["role"] == "tool" and msgs[3]["tool_call_id"] == "c1"
    # the rejected double call: one tool answer per call id
    assert [m.get("tool_call_id") for m in msgs[4:7]] == [None, "x", "y"]


def test_import_rejects_other_files(tmp_path):
    with pytest.raises(TrajFormatError, match="messages"):
        from_traj_json({"steps": []})
    bad = tmp_path / "x.traj.json"
    bad.write_text("{not json")
    with pytest.raises(TrajFormatError, match="x.traj.json"):
        load_traj_json(bad)


def test_prefix_steps_survive_round_trip():
    traj = Trajectory(task="t", seed=0, models={"policy": "p"}, instruction="do",
                      steps=[Step("r", "ls", output="x\n", exit_code=0, source="prefix", meta={"restore": {"exact": True}}),
                             Step("", "cat y", output="", exit_code=1, source="teacher")],
                      prefix_len=1, exit_reason="step_limit", reward=0.0)
    assert from_traj_json(to_traj_json(traj)).to_dict() == traj.to_dict()


DATA = Path(__file__).parent.parent / "data" / "trajectories"


def _two_call_reply() -> dict:
    """A mini-swe-agent 2.x tool-call document whose second reply makes two bash calls (both executed)."""
    def call(cid, cmd):
        return {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": cmd})}}

    def answer(cid, out, rc):
        return {"role": "tool", "tool_call_id": cid, "content": f"<returncode>{rc}</returncode>\n<output>\n{out}</output>",
                "extra": {"raw_output": out, "returncode": rc, "exception_info": ""}}

    return {"info": {"exit_status": "Submitted", "submission": ""}, "trajectory_format": "mini-swe-agent-1.1",
            "messages": [
                {"role": "system", "content": "sys"}, {"role": "user", "content": "Please solve this issue: x"},
                {"role": "assistant", "content": "Look first.", "tool_calls": [call("c1", "ls")],
                 "extra": {"actions": [{"command": "ls", "tool_call_id": "c1"}]}},
                answer("c1", "a.txt\nb.txt\n", 0),
                {"role": "assistant", "content": "Read both.", "tool_calls": [call("c2", "cat a.txt"), call("c3", "cat b.txt")],
                 "extra": {"actions": [{"command": "cat a.txt", "tool_call_id": "c2"},
                                       {"command": "cat b.txt", "tool_call_id": "c3"}]}},
                answer("c2", "A\n", 0), answer("c3", "cat: b.txt: Permission denied\n", 1),
                {"role": "assistant", "content": "", "tool_calls": [call("c4", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")],
                 "extra": {"actions": [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "tool_call_id": "c4"}]}},
                {"role": "exit", "content": "", "extra": {"exit_status": "Submitted", "submission": ""}},
            ]}


def test_two_tool_calls_in_one_reply_are_two_steps():
    t = from_traj_json(_two_call_reply())
    assert [s.command for s in t.steps] == ["ls", "cat a.txt", "cat b.txt", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    assert [(s.output, s.exit_code) for s in t.steps[1:3]] == [("A\n", 0), ("cat: b.txt: Permission denied\n", 1)]
    assert [s.reasoning for s in t.steps[1:3]] == ["Read both.", ""]  # the shared reasoning sits on the first


def test_a_chat_transcript_reads_the_command_of_a_shell_tool_of_any_name():
    """OpenAI-style transcripts name their shell tool as they like (`execute_bash`, `shell` with `cmd`)."""
    def call(cid, name, args):
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}

    data = {"messages": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "Please solve this issue: x"},
        {"role": "assistant", "content": "Count.", "tool_calls": [call("c1", "execute_bash", {"command": "wc -l d.txt"})]},
        {"role": "tool", "tool_call_id": "c1", "content": "3 d.txt"},
        {"role": "assistant", "content": "Stop it.", "tool_calls": [call("c2", "shell", {"cmd": "pkill python"})]},
        {"role": "tool", "tool_call_id": "c2", "content": ""},
        {"role": "assistant", "content": "Look.", "tool_calls": [call("c3", "str_replace_editor",
                                                                      {"command": "view", "path": "/app/d.txt"})]},
        {"role": "tool", "tool_call_id": "c3", "content": "a\nb\nc"}]}
    t = from_traj_json(data)
    assert [s.command for s in t.steps] == ["wc -l d.txt", "pkill python", None]  # an editor's view runs no shell
    assert "3 d.txt" in t.steps[0].output


def test_an_imported_file_is_exported_as_it_was():
    data = _two_call_reply()
    assert to_traj_json(from_traj_json(json.loads(json.dumps(data)))) == data


def test_a_two_call_reply_is_exported_as_one_message_again():
    data = _two_call_reply()
    traj = from_traj_json(data)
    traj.meta.pop("miniswe")  # as if the steps came from elsewhere: nothing of the original is kept
    for s in traj.steps:
        s.meta.pop("miniswe_messages", None)
    back = to_traj_json(traj)
    replies = [m for m in back["messages"] if m["role"] == "assistant"]
    assert len(replies) == 3
    assert [c["id"] for c in replies[1]["tool_calls"]] == ["c2", "c3"]
    assert replies[1]["extra"]["actions"] == data["messages"][4]["extra"]["actions"]
    answers = [(m["tool_call_id"], m["extra"]["raw_output"], m["extra"]["returncode"])
               for m in back["messages"] if m["role"] == "tool"]
    assert answers == [("c1", "a.txt\nb.txt\n", 0), ("c2", "A\n", 0), ("c3", "cat: b.txt: Permission denied\n", 1),
                       ("c4", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", 0)]  # 2.x wrote none: rebuilt from the exit
    strip = [{**s, "meta": {k: v for k, v in s["meta"].items() if k != "miniswe_messages"}}
             for s in from_traj_json(data).to_dict()["steps"]]
    assert [{**s, "meta": {k: v for k, v in s["meta"].items() if k != "miniswe_messages"}}
            for s in from_traj_json(back).to_dict()["steps"]] == strip


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.traj.json")))
def test_detect_and_import_read_the_same_steps(name):
    [seen_by_detect] = read_trajectories(DATA / name)
    imported = load_traj_json(DATA / name)
    assert [asdict(s) for s in imported.steps] == [asdict(s) for s in seen_by_detect.steps]


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.json")))
def test_an_imported_file_survives_export_and_import(name):
    imported = load_traj_json(DATA / name)
    again = from_traj_json(to_traj_json(imported))
    assert [asdict(s) for s in again.steps] == [asdict(s) for s in imported.steps]


# --- files written by mini-swe-agent itself (tests/data/trajectories/SOURCE.md) ------------------

MSWEA_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat count.txt"
NO_FILE = "cat: header.txt: No such file or directory\n"


def _raw(name):
    return json.loads((DATA / name).read_text())


def _actions_in_file(data) -> list:
    """Commands in file order, counted straight from the JSON: each executed action of an assistant
    message, and None for each format-error message (2.x keeps no assistant message for those)."""
    out = []
    for m in data["messages"]:
        if m["role"] == "assistant":
            out += [a["command"] for a in m["extra"]["actions"]]
        elif m["role"] == "user" and m.get("extra", {}).get("interrupt_type") == "FormatError":
            out.append(None)
    return out


def _observed_in_file(data) -> dict:
    """raw_output and returncode of each tool answer, by call id."""
    return {m["tool_call_id"]: (m["extra"]["raw_output"], m["extra"]["returncode"])
            for m in data["messages"] if m["role"] == "tool"}


def test_real_2x_text_file():
    data = _raw("mswea2_text.traj.json")
    t = load_traj_json(DATA / "mswea2_text.traj.json")
    commands = ["ls", "wc -l < data.txt", None, None, "cat header.txt", "sleep 5",
                "wc -l < data.txt > count.txt && cat count.txt", MSWEA_SUBMIT]
    assert _actions_in_file(data) == commands
    assert [s.command for s in t.steps] == commands
    assert [(s.output, s.exit_code, s.timed_out) for s in t.steps if s.command] == [
        ("data.txt\nrecords.bin\n", 0, False), ("3\n", 0, False), (NO_FILE, 1, False), ("", -1, True), ("3\n", 0, False),
        ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n3\n", 0, False)]  # no observation in the file: rebuilt from the exit
    errors = [m for m in data["messages"] if m.get("extra", {}).get("interrupt_type") == "FormatError"]
    assert [(s.raw, s.output) for s in t.steps if s.command is None] == [
        (m["extra"]["model_response"], m["content"]) for m in errors]
    assert t.steps[2].raw == "I think the count is three." and t.steps[3].reasoning == "Both at once."
    assert t.steps[0].reasoning == "THOUGHT: Look at the files first."
    assert (t.task, t.exit_reason, t.models) == ("mswea2_text", "submitted", {"policy": "openai/scripted"})
    assert t.instruction.startswith("Please solve this issue: Count the lines of data.txt into count.txt.")


def test_real_2x_toolcall_file_with_a_two_call_reply():
    data = _raw("mswea2_toolcall.traj.json")
    t = load_traj_json(DATA / "mswea2_toolcall.traj.json")
    commands = ["ls", None, "cat data.txt", "cat header.txt", None,
                "wc -l < data.txt > count.txt && cat count.txt", MSWEA_SUBMIT]
    assert _actions_in_file(data) == commands
    assert [s.command for s in t.steps] == commands
    seen = _observed_in_file(data)
    ids = ["call_ls", None, "call_cat_data", "call_cat_header", None, "call_wc"]
    assert [(s.output, s.exit_code) for s, i in zip(t.steps, ids) if i] == [seen[i] for i in ids if i]
    assert [seen[i] for i in ("call_cat_data", "call_cat_header")] == [("alpha\nbeta\ngamma\n", 0), (NO_FILE, 1)]
    assert [s.reasoning for s in t.steps[2:4]] == ["Read both files.", ""]
    assert (t.steps[2].meta["reply_actions"], t.steps[3].meta["reply_action"]) == (2, 1)
    assert "No tool calls found" in t.steps[1].output and t.steps[1].raw == "Now I will count the lines."
    assert "Unknown tool 'python'" in t.steps[4].output and t.steps[4].meta["tool_calls"][0]["function"]["name"] == "python"
    assert t.steps[6].output == "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n3\n" and t.meta["action_format"] == "tool"
    assert to_traj_json(t) == data  # exported again: the file as mini-swe-agent wrote it
    # written our way (nothing of the original kept), the two-call reply is one assistant message again
    t.meta.pop("miniswe")
    for s in t.steps:
        s.meta.pop("miniswe_messages", None)
    replies = [m for m in to_traj_json(t)["messages"] if m["role"] == "assistant"]
    original = [m for m in data["messages"] if m["role"] == "assistant"]
    assert len(replies) == len(original) + 2  # the two format errors 2.x kept no assistant message for
    two = next(m for m in replies if len(m.get("tool_calls", [])) == 2)
    assert two["tool_calls"] == original[1]["tool_calls"] and two["extra"]["actions"] == original[1]["extra"]["actions"]


def test_real_2x_step_limit_file():
    t = load_traj_json(DATA / "mswea2_step_limit.traj.json")
    assert [s.command for s in t.steps] == ["ls", "ls -a"]  # the third reply was never asked for
    assert t.steps[1].output == ".\n..\ndata.txt\nrecords.bin\n" and t.exit_reason == "step_limit"


def test_real_1x_text_file():
    data = _raw("mswea1_text.traj.json")
    t = load_traj_json(DATA / "mswea1_text.traj.json")
    replies = [m["content"] for m in data["messages"] if m["role"] == "assistant"]
    assert len(t.steps) == len(replies) == 8  # 1.x keeps every reply, malformed ones included
    assert [s.raw for s in t.steps] == replies
    assert [s.command for s in t.steps] == ["ls", "wc -l < data.txt", None, None, "cat header.txt", "sleep 5",
                                            "wc -l < data.txt > count.txt && cat count.txt", MSWEA_SUBMIT]
    assert [(s.output, s.exit_code, s.timed_out) for s in t.steps if s.command] == [
        ("data.txt\nrecords.bin\n", 0, False), ("3\n", 0, False), (NO_FILE, 1, False), ("", None, True), ("3\n", 0, False),
        ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n3\n", 0, False)]
    assert [s.output.split(",")[0] for s in t.steps[2:4]] == ["Please always provide EXACTLY ONE action in triple backticks"] * 2
    assert t.exit_reason == "submitted" and t.meta["imported_from"] == "mini-swe-agent-1"


def test_real_file_from_mini_swe_agent_repository():
    data = _raw("mswea_repo_github_issue.traj.json")
    t = load_traj_json(DATA / "mswea_repo_github_issue.traj.json")
    replies = [m["content"] for m in data if m["role"] == "assistant"]
    answers = [m["content"] for m in data[2:] if m["role"] == "user"]
    assert len(t.steps) == len(replies) == len(answers) == 10
    assert [s.command for s in t.steps] == [r.split("```mswea_bash_command\n")[1].split("\n```")[0] for r in replies]
    assert [s.exit_code for s in t.steps[:-1]] == [int(a.split("</returncode>")[0].removeprefix("<returncode>"))
                                                  for a in answers[:-1]]
    assert t.steps[0].output == answers[0].split("<output>\n")[1].removesuffix("</output>")
    assert t.steps[-1].output == "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n" + answers[-1]  # 1.x: the submission alone


def test_rollout_import_reads_the_real_files(tmp_path, capsys):
    from mirl.cli import main

    real = tmp_path / "real"
    real.mkdir()
    names = sorted(p.name for p in DATA.glob("mswea*.traj.json"))
    for n in names:
        (real / n).write_text((DATA / n).read_text())
    assert main(["rollout", "import", str(real), "--to", str(tmp_path / "out.jsonl")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["imported"] == len(names)
    imported = {t.task: t for t in load_trajectories(tmp_path / "out.jsonl")}
    assert {n: len(imported[n.removesuffix(".traj.json")].steps) for n in names} == {
        "mswea1_text.traj.json": 8, "mswea2_step_limit.traj.json": 2, "mswea2_text.traj.json": 8,
        "mswea2_toolcall.traj.json": 7, "mswea_repo_github_issue.traj.json": 10}
