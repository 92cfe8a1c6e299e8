"""`mirl detect` end to end through the CLI entry point."""

import json
from pathlib import Path

from mirl.cli import main

DATA = Path(__file__).parent.parent / "data" / "trajectories"


def test_json_lines_for_every_format(capsys):
    rc = main(["detect", "--json", str(DATA), str(DATA / "count_lines_chat.json")])
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines()]
    assert rc == 0
    assert all({"file", "step", "command", "detector", "evidence"} <= set(r) for r in rows)
    got = {(Path(r["file"]).name, r["step"], r["detector"]) for r in rows}
    expected = {
        ("csv_export_text_v1.traj.json", 1, "binary-as-text"),
        ("csv_export_text_v1.traj.json", 2, "no-runnable-command"),
        ("csv_export_text_v1.traj.json", 4, "retry-unchanged-after-failure"),
        ("csv_export_text_v1.traj.json", 6, "recheck-unchanged-after-success"),
        ("csv_export_text_v1.traj.json", 8, "submit-without-check"),
        ("restart_service_toolcall_v2.traj.json", 2, "broad-kill"),
        ("restart_service_toolcall_v2.traj.json", 3, "no-runnable-command"),
        ("restart_service_toolcall_v2.traj.json", 5, "binary-as-text"),
        ("restart_service_toolcall_v2.traj.json", 8, "broad-kill"),
        ("rollouts.jsonl", 0, "broad-kill"),
        ("rollouts.jsonl", 1, "no-runnable-command"),
        ("rollouts.jsonl", 2, "broad-kill"),
        ("count_lines_chat.json", 1, "retry-unchanged-after-failure"),
        ("count_lines_chat.json", 3, "submit-without-check"),
    }
    assert got == expected  # the clean text-based trajectory and the second JSONL record have no flags
    no_cmd = [r for r in rows if r["detector"] == "no-runnable-command"]
    assert all(r["command"] == "" for r in no_cmd)
    kill = next(r for r in rows if r["step"] == 8 and r["detector"] == "broad-kill")
    assert kill["command"] == "kill $(lsof -t -i:9090)"


def test_summary_table(capsys):
    rc = main(["detect", str(DATA)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "4 file(s), 5 trajectories" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("broad-kill"))
    assert line.split()[1:] == ["4", "2/5"]
    assert "examples:" in out and "[binary-as-text]" in out


def test_detector_selection(capsys):
    rc = main(["detect", "--json", "--detectors", "broad-kill", str(DATA / "rollouts.jsonl")])
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert rc == 0 and [r["step"] for r in rows] == [0, 2] and {r["detector"] for r in rows} == {"broad-kill"}


def test_unknown_detector_is_a_clear_error(capsys):
    rc = main(["detect", "--detectors", "nope", str(DATA)])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown detector(s): nope" in err and "broad-kill" in err


def test_unreadable_files_are_reported_and_others_still_run(tmp_path, capsys):
    bad = tmp_path / "bad.traj.json"
    bad.write_text("{ this is not json")
    rc = main(["detect", "--json", str(bad), str(tmp_path / "missing.jsonl"), str(DATA / "rollouts.jsonl")])
    captured = capsys.readouterr()
    assert rc == 2
    assert str(bad) in captured.err and "missing.jsonl" in captured.err and "Traceback" not in captured.err
    assert len(captured.out.splitlines()) == 3  # rollouts.jsonl was still processed


def test_empty_directory_and_no_arguments(tmp_path, capsys):
    assert main(["detect", str(tmp_path)]) == 2
    assert "no *.traj.json or *.jsonl files" in capsys.readouterr().err
    assert main(["detect"]) == 2


def test_list(capsys):
    assert main(["detect", "--list"]) == 0
    out = capsys.readouterr().out
    assert "submit-without-check" in out and "It is not" in out
