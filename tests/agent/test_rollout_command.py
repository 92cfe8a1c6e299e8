import json
from pathlib import Path

import pytest

from mirl.agent.miniswe import FORMAT
from mirl.cli import main
from mirl.jsonl import append_jsonl
from mirl.records.trajectory import Step, Trajectory, load_trajectories


def test_missing_tasks_is_a_clear_error(tmp_path, capsys):
    assert main(["rollout", "--tasks", str(tmp_path / "nope"), "--out", str(tmp_path / "r")]) == 2
    assert "no such task path" in capsys.readouterr().err


def test_bad_numbers_are_rejected(tmp_path, capsys):
    assert main(["rollout", "--tasks", str(tmp_path), "--workers", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err


def test_bad_params_file_names_the_key(tmp_path, capsys):
    p = tmp_path / "p.yaml"
    p.write_text("agent:\n  max_stepz: 3\n")
    assert main(["rollout", "--params", str(p), "--tasks", str(tmp_path)]) == 2
    assert "agent.max_stepz" in capsys.readouterr().err


def test_export_then_import(tmp_path, capsys):
    runs = tmp_path / "trajectories.jsonl"
    for seed in (0, 1):
        t = Trajectory(task="hello", seed=seed, models={"policy": "p"}, instruction="do it",
                       steps=[Step("look", "ls", output="a\n", exit_code=0)], exit_reason="step_limit", reward=0.0)
        append_jsonl(runs, t.to_dict())
    assert main(["rollout", "export", str(runs), "--to", str(tmp_path / "traj")]) == 0
    files = sorted((tmp_path / "traj").glob("*.traj.json"))
    assert [f.name for f in files] == ["hello.seed0.traj.json", "hello.seed1.traj.json"]
    assert json.loads(files[0].read_text())["trajectory_format"] == FORMAT
    (tmp_path / "traj" / "junk.traj.json").write_text("[]")
    assert main(["rollout", "import", str(tmp_path / "traj"), "--to", str(tmp_path / "back.jsonl")]) == 0
    captured = capsys.readouterr()
    assert "junk.traj.json" in captured.err
    back = load_trajectories(tmp_path / "back.jsonl")
    assert [t.to_dict() for t in back] == [t.to_dict() for t in load_trajectories(runs)]


def test_export_of_a_file_it_cannot_read_is_an_error_naming_it_and_writes_nothing(tmp_path, capsys):
    """A corrupt or foreign file given to `export` raised RecordError out of the command (a traceback),
    after the files before it were already written."""
    good = tmp_path / "trajectories.jsonl"
    t = Trajectory(task="hello", seed=0, models={"policy": "p"}, instruction="do it",
                   steps=[Step("look", "ls", output="a\n", exit_code=0)], exit_reason="step_limit", reward=0.0)
    append_jsonl(good, t.to_dict())
    for bad, text in (("corrupt.jsonl", "{not json\n"), ("foreign.traj.json", '{\n  "messages": []\n}\n'),
                      ("no_task.jsonl", '{"steps": [1]}\n')):
        (tmp_path / bad).write_text(text)
        assert main(["rollout", "export", str(good), str(tmp_path / bad), "--to", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"mirl rollout: {tmp_path / bad}: ") and "Traceback" not in err, err
        assert not (tmp_path / "out").exists()  # the good file's trajectories were not written either


DATA = Path(__file__).parent.parent / "data"
MINI_FILES = sorted([*(DATA / "trajectories" / "swebench_mini1").glob("*.traj.json"),
                     *(DATA / "trajectories").glob("mswea*.traj.json")])


@pytest.mark.parametrize("src", MINI_FILES, ids=lambda p: p.name)
def test_import_then_export_of_real_mini_swe_agent_files_gives_the_same_document(tmp_path, capsys, src):
    assert main(["rollout", "import", str(src), "--to", str(tmp_path / "in.jsonl")]) == 0
    [t] = load_trajectories(tmp_path / "in.jsonl")
    assert main(["rollout", "export", str(tmp_path / "in.jsonl"), "--to", str(tmp_path / "out")]) == 0
    [out] = (tmp_path / "out").glob("*.traj.json")
    original = json.loads(src.read_text())
    assert json.loads(out.read_text()) == original  # dict equality: key order ignored
    if isinstance(original, dict) and "instance_id" in original:
        assert t.task == original["instance_id"]
    if isinstance(original, dict) and original["info"].get("submission"):
        assert t.meta["submission"] == original["info"]["submission"]


def test_atif_export_re_reads_to_the_same_steps(tmp_path, capsys):
    runs = tmp_path / "trajectories.jsonl"
    steps = [Step("look", "ls", output="a\n", exit_code=0, input_tokens=12, output_tokens=3, raw="look\n```bash\nls\n```"),
             Step("", None, output="Format error: no block", raw="hmm"),
             Step("done", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", output="COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n",
                  exit_code=0, duration_s=0.5)]
    steps[0].completion_ids, steps[0].logprobs, steps[0].tokens = [5, 6, 7], [-0.5, -0.1, -0.2], "sampled"
    steps[0].meta.update({"note": "x"})
    t = Trajectory(task="hello", seed=3, models={"policy": "p"}, instruction="do it", steps=steps,
                   exit_reason="submitted", reward=1.0)
    append_jsonl(runs, t.to_dict())
    assert main(["rollout", "export", str(runs), "--to", str(tmp_path / "atif"), "--format", "atif"]) == 0
    [f] = (tmp_path / "atif").glob("*.trajectory.json")
    doc = json.loads(f.read_text())
    assert doc["schema_version"].startswith("ATIF-v1.")
    agent_steps = [s for s in doc["steps"] if s["source"] == "agent"]
    assert agent_steps[0]["metrics"]["completion_token_ids"] == [5, 6, 7]
    assert agent_steps[0]["metrics"]["logprobs"] == [-0.5, -0.1, -0.2]
    assert agent_steps[0]["tool_calls"][0]["arguments"] == {"command": "ls"}
    assert "tool_calls" not in agent_steps[1] and agent_steps[1]["observation"]["results"][0]["content"] == "Format error: no block"
    assert [s["step_id"] for s in doc["steps"]] == list(range(1, len(doc["steps"]) + 1))
    assert main(["rollout", "import", str(f), "--to", str(tmp_path / "back.jsonl")]) == 0
    [back] = load_trajectories(tmp_path / "back.jsonl")
    assert back.to_dict() == t.to_dict()


def test_importing_the_same_files_again_adds_nothing(tmp_path, capsys):
    dest = tmp_path / "in.jsonl"
    assert main(["rollout", "import", *map(str, MINI_FILES[:2]), "--to", str(dest)]) == 0
    first = dest.read_text()
    capsys.readouterr()
    assert main(["rollout", "import", *map(str, MINI_FILES[:3]), "--to", str(dest)]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (report["imported"], report["already_there"]) == (1, 2)
    assert dest.read_text().startswith(first) and len(load_trajectories(dest)) == 3


def test_an_import_that_reads_no_file_fails(tmp_path, capsys):
    """A chained script must see that nothing came in; one unreadable file among good ones does not fail."""
    bad = tmp_path / "notes.json"
    bad.write_text('{"hello": "not a trajectory"}')
    dest = tmp_path / "in.jsonl"
    assert main(["rollout", "import", str(bad), "--to", str(dest)]) == 1
    err = capsys.readouterr().err
    assert str(bad) in err and "none of the 1 file(s) could be read" in err
    assert main(["rollout", "import", str(bad), str(MINI_FILES[0]), "--to", str(dest)]) == 0
    assert len(load_trajectories(dest)) == 1
