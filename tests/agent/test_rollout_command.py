import json

from mirl.agent.miniswe import FORMAT
from mirl.agent.trajectory import Step, Trajectory, load_trajectories
from mirl.cli import main
from mirl.jsonl import append_jsonl


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
