"""Reading trajectory files: our JSONL and mini-swe-agent's text and tool-call formats."""

import json
from pathlib import Path

import pytest

from mirl.agent.miniswe import from_traj_json
from mirl.agent.trajectory import Step, Trajectory
from mirl.detectors.sources import TrajectoryFileError, find_files, read_trajectories

DATA = Path(__file__).parent.parent / "data" / "trajectories"


def test_text_format_v1():
    [t] = read_trajectories(DATA / "handwritten_csv_export_text_v1.traj.json")
    assert t.task == "handwritten_csv_export_text_v1" and t.models == {"policy": "openai/qwen3-8b"}
    assert t.exit_reason == "submitted" and "CSV exporter" in t.instruction
    assert [s.command for s in t.steps][:3] == ["ls -la", "cat data/records.bin", None]
    assert t.steps[0].exit_code == 0 and t.steps[0].output.startswith("total 16")
    assert t.steps[2].output.startswith("Please always provide EXACTLY ONE action")  # the format error shown
    assert t.steps[3].exit_code == 1 and "line contains NUL" in t.steps[3].output
    assert t.steps[-1].command == "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    assert t.steps[1].reasoning == "THOUGHT: Let me see what the data file contains."  # as our parser keeps it


def test_toolcall_format_v2():
    [t] = read_trajectories(DATA / "handwritten_restart_service_toolcall_v2.traj.json")
    assert len(t.steps) == 11 and t.exit_reason == "submitted"
    assert t.steps[3].command is None and "No tool calls found" in t.steps[3].output
    assert t.steps[3].raw == "Now I will look at the model file the service loads."  # kept from extra.response
    # one assistant message with two tool calls = two steps, each with its own result
    assert t.steps[6].command.startswith("cat > /app/config.ini <<'EOF'") and t.steps[6].output == ""
    assert t.steps[7].command == "cat /app/config.ini" and "debug = false" in t.steps[7].output
    assert t.steps[8].exit_code == 1
    assert t.steps[10].exit_code == 0  # submitted: no observation, the exit message closes it


def test_textbased_v2_and_plain_chat():
    [t] = read_trajectories(DATA / "handwritten_serve_http_textbased_v2.traj.json")
    assert [s.exit_code for s in t.steps][:5] == [0, 0, 0, 7, 0]
    [c] = read_trajectories(DATA / "handwritten_count_lines_chat.json")
    assert [s.command for s in c.steps][:2] == ["wc -l /data/log.txt"] * 2
    assert c.steps[0].exit_code == 1 and "No such file" in c.steps[0].output  # parsed from rendered JSON


def test_our_jsonl_roundtrip(tmp_path):
    ts = read_trajectories(DATA / "handwritten_rollouts.jsonl")
    assert [t.task for t in ts] == ["stop-node-server", "write-greeting"]
    assert ts[0].steps[1].command is None and ts[0].reward == 1.0
    out = tmp_path / "again.jsonl"
    out.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in ts))
    assert [t.steps for t in read_trajectories(out)] == [t.steps for t in ts]


def test_rendered_observation_templates():
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "go\n```bash\nls\n```"},
        {"role": "user", "content": "<returncode>2</returncode>\n<output>\nls: cannot access\n</output>"},
        {"role": "assistant", "content": "big\n```bash\ncat big.log\n```"},
        {"role": "user", "content": "<returncode>0</returncode>\n<warning>too long</warning><output_head>\nAAA\n</output_head>"
                                    "<elided_chars>\n99 characters elided\n</elided_chars><output_tail>\nZZZ\n</output_tail>"},
        {"role": "assistant", "content": "two blocks\n```bash\nls\n```\n```bash\npwd\n```"},
        {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks, found 2 actions."},
        {"role": "assistant", "content": "slow\n```bash\nsleep 999\n```"},
        {"role": "user", "content": "The last command <command>sleep 999</command> timed out and has been killed.\n<output>\n\n</output>"},
    ]
    t = from_traj_json(msgs, task="x")
    assert [s.command for s in t.steps] == ["ls", "cat big.log", None, "sleep 999"]
    assert t.steps[0].exit_code == 2 and t.steps[0].output.strip() == "ls: cannot access"
    assert "AAA" in t.steps[1].output and "ZZZ" in t.steps[1].output
    assert "found 2 actions" in t.steps[2].output
    assert t.steps[3].timed_out


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("empty.jsonl", "", "empty"),
        ("bad.jsonl", '{"task": "a", "steps": []}\n{not json\n', ":2: not valid JSON"),
        ("wrong.jsonl", '{"hello": 1}\n', "expected a trajectory object"),
        ("other.traj.json", '{"foo": [1, 2]}', "not a trajectory"),
        ("numbers.json", "[1, 2, 3]", "not a trajectory"),
    ],
)
def test_malformed_files_name_the_file(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(TrajectoryFileError, match=message) as err:
        read_trajectories(path)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(TrajectoryFileError, match="cannot read"):
        read_trajectories(tmp_path / "nope.jsonl")


def test_find_files_searches_directories(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "x.traj.json").write_text("{}")
    (tmp_path / "a" / "y.jsonl").write_text("")
    (tmp_path / "a" / "z.json").write_text("")
    found = find_files([tmp_path])
    assert sorted(p.name for p in found) == ["x.traj.json", "y.jsonl"]
    assert find_files([tmp_path / "a" / "z.json"]) == [tmp_path / "a" / "z.json"]


def test_trajectory_defaults_for_partial_records(tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps(Trajectory(task="t", seed=3, models={}, steps=[Step(reasoning="r", command="ls")]).to_dict()))
    [t] = read_trajectories(path)
    assert t.seed == 3 and t.steps[0].command == "ls"
