import json

import pytest
from agent_doubles import SUBMIT, FakeSandbox, Scripted, bash, tool_call

from mirl.agent import AgentConfig, Step, Trajectory, run_episode
from mirl.agent.miniswe import FORMAT, TrajFormatError, from_traj_json, load_traj_json, save_traj_json, to_traj_json
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
