import json
from dataclasses import asdict
from pathlib import Path

import pytest
from agent_doubles import SUBMIT, FakeSandbox, Scripted, bash, tool_call

from mirl.agent import AgentConfig, Step, Trajectory, run_episode
from mirl.agent.miniswe import FORMAT, TrajFormatError, from_traj_json, load_traj_json, save_traj_json, to_traj_json
from mirl.detectors.sources import read_trajectories
from mirl.sandbox.base import CommandResult


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


def test_import_a_file_written_by_mini_swe_agent_itself():
    # shape of DefaultAgent.serialize() output in text mode (2.x: malformed replies live in the error message)
    data = {
        "info": {"exit_status": "Submitted", "submission": "", "model_stats": {"instance_cost": 0.0, "api_calls": 3},
                 "config": {"model": {"model_name": "openai/some-model"}}},
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "Please solve this issue: fix it"},
            {"role": "assistant", "content": "THOUGHT: look\n\n```mswea_bash_command\nls\n```",
             "extra": {"actions": [{"command": "ls"}], "cost": 0.0}},
            {"role": "user", "content": "<returncode>0</returncode>\n<output>\na.py\n</output>",
             "extra": {"raw_output": "a.py\n", "returncode": 0}},
            {"role": "user", "content": "Format error: ...", "extra": {"interrupt_type": "FormatError",
                                                                       "model_response": "just talking"}},
            {"role": "assistant", "content": "done\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
             "extra": {"actions": [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}]}},
            {"role": "exit", "content": "", "extra": {"exit_status": "Submitted", "submission": ""}},
        ],
        "trajectory_format": "mini-swe-agent-1.1",
        "instance_id": "django-123",
    }
    t = from_traj_json(data)
    assert t.task == "django-123" and t.exit_reason == "submitted" and t.models == {"policy": "openai/some-model"}
    assert [s.command for s in t.steps] == ["ls", None, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    assert t.steps[0].output == "a.py\n" and t.steps[0].exit_code == 0 and t.steps[0].reasoning == "THOUGHT: look"
    assert t.steps[1].raw == "just talking" and t.steps[1].output == "Format error: ..."


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


def test_a_two_call_reply_is_exported_as_one_message_again():
    data = _two_call_reply()
    back = to_traj_json(from_traj_json(data))
    replies = [m for m in back["messages"] if m["role"] == "assistant"]
    assert len(replies) == 3
    assert [c["id"] for c in replies[1]["tool_calls"]] == ["c2", "c3"]
    assert replies[1]["extra"]["actions"] == data["messages"][4]["extra"]["actions"]
    answers = [(m["tool_call_id"], m["extra"]["raw_output"], m["extra"]["returncode"])
               for m in back["messages"] if m["role"] == "tool"]
    assert answers == [("c1", "a.txt\nb.txt\n", 0), ("c2", "A\n", 0), ("c3", "cat: b.txt: Permission denied\n", 1),
                       ("c4", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", 0)]  # 2.x wrote none: rebuilt from the exit
    assert from_traj_json(back).to_dict()["steps"] == from_traj_json(data).to_dict()["steps"]


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
