"""Reading trajectory files: our JSONL and mini-swe-agent's text and tool-call formats."""

import json
from pathlib import Path

import pytest

from mirl.agent.miniswe import from_traj_json
from mirl.records.trajectory import Step, Trajectory
from mirl.sources import TrajectoryFileError
from mirl.sources import find_sources as find_files
from mirl.sources import read_source as read_trajectories

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
    assert [s.exit_code for s in t.steps] == [0, 0, 0, 7, 0, 0]
    [c] = read_trajectories(DATA / "handwritten_count_lines_chat.json")
    assert [s.command for s in c.steps] == ["wc -l /data/log.txt"] * 2 + ["echo 0 > /app/count.txt",
                                                                          "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    # parsed from the rendered JSON; the transcript ends before the last call is answered
    assert [(s.output, s.exit_code) for s in c.steps] == [("wc: /data/log.txt: No such file or directory\n", 1)] * 2 + [
        ("", 0), ("", None)]
    assert c.instruction == "Count the lines of /data/log.txt into /app/count.txt." and c.steps[1].reasoning == "Try again."


def test_our_jsonl_roundtrip(tmp_path):
    ts = read_trajectories(DATA / "handwritten_rollouts.jsonl")
    raw = [json.loads(line) for line in (DATA / "handwritten_rollouts.jsonl").read_text().splitlines()]
    assert [t.task for t in ts] == ["stop-node-server", "write-greeting"]
    assert [[s.command for s in t.steps] for t in ts] == [[s["command"] for s in r["steps"]] for r in raw]
    assert [t.meta["line"] for t in ts] == [1, 2]
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
    assert t.steps[1].output == "AAA\n[... output elided ...]\nZZZ" and t.steps[1].exit_code == 0
    assert t.steps[2].output == msgs[7]["content"] and t.steps[2].raw == msgs[6]["content"]
    assert t.steps[3].timed_out and t.steps[3].exit_code is None and t.steps[3].output == ""  # the template adds the newlines


def test_rendered_json_observations_of_mini_yaml():
    """Tool mode in 2.x renders outputs as JSON (mini.yaml), long ones as head, tail and elided count."""
    call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "cat big"})}}
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c", "content": json.dumps(
                {"returncode": 3, "output_head": "HEAD", "output_tail": "TAIL", "elided_chars": 42, "warning": "long"})}]
    [s] = from_traj_json(msgs).steps
    assert (s.command, s.exit_code, s.output) == ("cat big", 3, "HEAD\n[... 42 characters elided ...]\nTAIL")


@pytest.mark.parametrize("status, reason", [("Submitted", "submitted"), ("LimitsExceeded", "step_limit"),
                                            ("TimeExceeded", "agent_timeout"), ("RepeatedFormatError", "error"),
                                            ("ContextWindowExceededError", "token_limit"), ("RuntimeError", "error")])
def test_exit_status_names_map_to_our_exit_reasons(status, reason):
    t = from_traj_json({"info": {"exit_status": status}, "messages": [{"role": "user", "content": "task"}]})
    assert (t.exit_reason, t.meta["exit_status"]) == (reason, status)


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("empty.jsonl", "", "empty"),
        ("bad.jsonl", '{"task": "a", "steps": []}\n{not json\n', ":2: not valid JSON"),
        ("wrong.jsonl", '{"hello": 1}\n', "expected a trajectory object"),
        ("other.traj.json", '{"foo": [1, 2]}', "not a trajectory"),
        ("numbers.json", "[1, 2, 3]", "not a trajectory"),
        ("future.trajectory.json", '{"schema_version": "ATIF-v9.9", "steps": [{"step_id": 1, "source": "user"}]}',
         "this reader knows ATIF v1"),
        ("odd.trajectory.json", '{"schema_version": "ATIF-latest", "steps": []}', "is not an ATIF version"),
        # a step short of its fields was a constructor's TypeError ("Step.__init__() missing 2 required ...")
        ("fieldless.traj.json", '{"steps": [{"x": 1}]}', "step 0: a step needs 'reasoning' and 'command'"),
        ("intsteps.traj.json", '{"steps": [1, 2]}', "step 0 is not an object, got int"),
        ("short.jsonl", '{"task": "a", "steps": [{"command": "ls"}]}\n', ":1: .*step 0: a step needs 'reasoning'"),
    ],
)
def test_malformed_files_name_the_file(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(TrajectoryFileError, match=message) as err:
        read_trajectories(path)
    assert str(path) in str(err.value)


def test_a_torn_last_line_is_skipped_as_the_runs_own_reader_skips_it(tmp_path, caplog):
    """A trajectories.jsonl read while its run was killed (or still writing) mid-record was refused
    whole by `mirl detect` ("not valid JSON" on its last line), every complete trajectory with it."""
    good = json.dumps(Trajectory(task="t", seed=0, models={}, steps=[Step(reasoning="r", command="ls")]).to_dict())
    path = tmp_path / "trajectories.jsonl"
    path.write_text(good + "\n" + good.replace('"seed": 0', '"seed": 1') + "\n" + good[:40])
    with caplog.at_level("WARNING"):
        assert [t.seed for t in read_trajectories(path)] == [0, 1]
    assert f"{path}:3: skipped a torn last line" in caplog.text
    path.write_text(good + "\n" + good[:40] + "\n" + good + "\n")  # inside the file: corrupt, not torn
    with pytest.raises(TrajectoryFileError, match=":2: not valid JSON"):
        read_trajectories(path)


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
