import subprocess
import sys
import threading

import pytest

from mirl.jsonl import JsonlWriter, append_jsonl, read_jsonl, repair_tail


def test_append_and_read(tmp_path):
    p = tmp_path / "a" / "r.jsonl"
    append_jsonl(p, {"i": 0, "text": "naïve ✓"})
    with JsonlWriter(p) as w:
        w.append({"i": 1})
    records, report = read_jsonl(p)
    assert records == [{"i": 0, "text": "naïve ✓"}, {"i": 1}] and report.clean and report.records == 2


def test_missing_file_reads_empty(tmp_path):
    assert read_jsonl(tmp_path / "none.jsonl")[0] == []


def test_torn_last_line_is_skipped_reported_and_cut_before_appending(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"i": 0}\n{"i": 1}\n{"i": 2, "tex')
    records, report = read_jsonl(p)
    assert [r["i"] for r in records] == [0, 1] and report.torn_tail and report.torn_bytes == len('{"i": 2, "tex')
    with JsonlWriter(p) as w:
        assert w.repaired_bytes == len('{"i": 2, "tex')
        w.append({"i": 3})
    records, report = read_jsonl(p)
    assert [r["i"] for r in records] == [0, 1, 3] and report.clean


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path):
    """Files other tools wrote (a user's error steps) often end without a newline: not a torn write."""
    p = tmp_path / "r.jsonl"
    p.write_text('{"i": 0}\n{"i": 1}')
    records, report = read_jsonl(p)
    assert [r["i"] for r in records] == [0, 1] and report.clean
    with JsonlWriter(p) as w:
        assert w.repaired_bytes == 0
        w.append({"i": 2})
    assert [r["i"] for r in read_jsonl(p)[0]] == [0, 1, 2] and p.read_text().endswith('{"i": 2}\n')
    p.write_text('{"i": 0}')  # the only line
    assert repair_tail(p) == 0 and p.read_text() == '{"i": 0}\n'


def test_repair_on_file_without_any_newline(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"i": 0')
    assert repair_tail(p) == 7 and p.read_bytes() == b""


def test_corrupt_middle_line_is_skipped_and_reported(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"i": 0}\nnot json\n[1, 2]\n\n{"i": 1}\n')
    records, report = read_jsonl(p)
    assert [r["i"] for r in records] == [0, 1] and report.bad_lines == [2, 3] and not report.torn_tail


def test_unencodable_record_leaves_file_intact(tmp_path):
    p = tmp_path / "r.jsonl"
    with JsonlWriter(p) as w:
        w.append({"i": 0})
        with pytest.raises((TypeError, ValueError)):
            w.append({"bad": float("nan")})
        with pytest.raises(TypeError):
            w.append({"bad": object()})
        w.append({"i": 1})
    assert [r["i"] for r in read_jsonl(p)[0]] == [0, 1]


def test_threads_never_interleave_lines(tmp_path):
    p = tmp_path / "r.jsonl"
    payload = "x" * 20000  # larger than a pipe buffer / one write

    with JsonlWriter(p, fsync=False) as w:
        def work(k):
            for i in range(25):
                w.append({"k": k, "i": i, "payload": payload})

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    records, report = read_jsonl(p)
    assert report.clean and len(records) == 100
    assert sorted((r["k"], r["i"]) for r in records) == [(k, i) for k in range(4) for i in range(25)]


def test_records_survive_a_kill(tmp_path):
    """A process killed hard right after append returned has its record on disk."""
    p = tmp_path / "r.jsonl"
    code = (
        "import os, sys\n"
        "from mirl.jsonl import JsonlWriter\n"
        f"w = JsonlWriter({str(p)!r})\n"
        "for i in range(5): w.append({'i': i})\n"
        "os._exit(9)\n"  # no close, no flush at exit
    )
    proc = subprocess.run([sys.executable, "-c", code])
    assert proc.returncode == 9
    assert [r["i"] for r in read_jsonl(p)[0]] == list(range(5))
