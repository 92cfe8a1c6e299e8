"""`mirl detect` end to end through the CLI entry point."""

import json
from pathlib import Path

from mirl.cli import main

DATA = Path(__file__).parent.parent / "data" / "trajectories"


def _handwritten(tmp_path) -> Path:
    """The hand-written fixtures (the ones that hold each detector's misbehaviors) in a directory of their own."""
    d = tmp_path / "handwritten"
    d.mkdir()
    for f in DATA.glob("handwritten_*"):
        (d / f.name).write_bytes(f.read_bytes())
    return d


def test_json_lines_for_every_format(tmp_path, capsys):
    hw = _handwritten(tmp_path)
    rc = main(["detect", "--json", str(hw), str(hw / "handwritten_count_lines_chat.json")])
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines()]
    assert rc == 0
    assert all({"file", "step", "command", "detector", "evidence"} <= set(r) for r in rows)
    got = {(Path(r["file"]).name, r["step"], r["detector"]) for r in rows}
    expected = {
        ("handwritten_csv_export_text_v1.traj.json", 1, "binary-as-text"),
        ("handwritten_csv_export_text_v1.traj.json", 2, "no-runnable-command"),
        ("handwritten_csv_export_text_v1.traj.json", 4, "retry-unchanged-after-failure"),
        ("handwritten_csv_export_text_v1.traj.json", 6, "recheck-unchanged-after-success"),
        ("handwritten_csv_export_text_v1.traj.json", 8, "submit-without-check"),
        ("handwritten_restart_service_toolcall_v2.traj.json", 2, "broad-kill"),
        ("handwritten_restart_service_toolcall_v2.traj.json", 3, "no-runnable-command"),
        ("handwritten_restart_service_toolcall_v2.traj.json", 5, "binary-as-text"),
        ("handwritten_restart_service_toolcall_v2.traj.json", 8, "broad-kill"),
        ("handwritten_rollouts.jsonl", 0, "broad-kill"),
        ("handwritten_rollouts.jsonl", 1, "no-runnable-command"),
        ("handwritten_rollouts.jsonl", 2, "broad-kill"),
        ("handwritten_count_lines_chat.json", 1, "retry-unchanged-after-failure"),
        ("handwritten_count_lines_chat.json", 3, "submit-without-check"),
    }
    assert got == expected  # the clean text-based trajectory and the second JSONL record have no flags
    no_cmd = [r for r in rows if r["detector"] == "no-runnable-command"]
    assert all(r["command"] == "" for r in no_cmd)
    kill = next(r for r in rows if r["step"] == 8 and r["detector"] == "broad-kill")
    assert kill["command"] == "kill $(lsof -t -i:9090)"


def test_summary_table(tmp_path, capsys):
    rc = main(["detect", str(_handwritten(tmp_path))])
    out = capsys.readouterr().out
    assert rc == 0
    assert "4 file(s), 5 trajectories" in out  # the chat .json is not searched for in directories
    line = next(ln for ln in out.splitlines() if ln.startswith("broad-kill"))
    assert line.split()[1:] == ["4", "2/5"]
    assert "examples:" in out and "[binary-as-text]" in out


def test_detector_selection(capsys):
    rc = main(["detect", "--json", "--detectors", "broad-kill", str(DATA / "handwritten_rollouts.jsonl")])
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert rc == 0 and [r["step"] for r in rows] == [0, 2] and {r["detector"] for r in rows} == {"broad-kill"}


def test_unknown_detector_is_a_clear_error(capsys):
    rc = main(["detect", "--detectors", "nope", str(DATA)])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown detector(s): nope" in err and "broad-kill" in err


def test_unreadable_files_are_reported_and_others_still_run(tmp_path, capsys):
    bad = tmp_path / "bad.traj.json"
    bad.write_text("{ this is not json")
    rc = main(["detect", "--json", str(bad), str(tmp_path / "missing.jsonl"), str(DATA / "handwritten_rollouts.jsonl")])
    captured = capsys.readouterr()
    assert rc == 2
    assert str(bad) in captured.err and "missing.jsonl" in captured.err and "Traceback" not in captured.err
    assert len(captured.out.splitlines()) == 3  # handwritten_rollouts.jsonl was still processed


def test_empty_directory_and_no_arguments(tmp_path, capsys):
    assert main(["detect", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "no trajectory files or trial directories found" in captured.err and str(tmp_path) in captured.err
    assert "0 file(s), 0 trajectories" in captured.out  # not "-1 file(s)"
    assert main(["detect"]) == 2


def test_list(capsys):
    from mirl.detectors.catalog import get_detectors

    assert main(["detect", "--list"]) == 0
    out = capsys.readouterr().out
    detectors = get_detectors()
    assert out.count("\n    ") == len(detectors) >= 6  # one indented definition per detector
    for det in detectors:
        assert f"{det.name}\n    {det.definition}\n" in out


def test_format_errors_in_real_files_are_flagged_where_the_file_has_them(capsys):
    names = sorted(p.name for p in DATA.glob("mswea*.traj.json"))
    assert main(["detect", "--json", "--detectors", "no-runnable-command", *(str(DATA / n) for n in names)]) == 0
    got = {(Path(r["file"]).name, r["step"]) for r in map(json.loads, capsys.readouterr().out.splitlines())}
    expected = set()
    for n in names:
        data = json.loads((DATA / n).read_text())
        messages = data["messages"] if isinstance(data, dict) else data
        step = 0
        for m in messages:  # a step per executed action, and per malformed reply
            if m["role"] == "assistant" and "extra" in m:
                step += len(m["extra"]["actions"])
            elif m["role"] == "assistant":  # 1.x: one reply, one step; malformed when not exactly one block
                blocks = m["content"].count("```bash\n") + m["content"].count("```mswea_bash_command\n")
                expected |= {(n, step)} if blocks != 1 else set()
                step += 1
            elif m.get("extra", {}).get("interrupt_type") == "FormatError":
                expected.add((n, step))
                step += 1
    assert got == expected and len(expected) == 6  # 2 each in the text files, 2 in the tool-call file
