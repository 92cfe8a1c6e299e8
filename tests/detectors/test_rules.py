"""Every rule detector on cases it must flag and near-misses it must leave alone."""

import pytest

from mirl.detectors import rules
from mirl.detectors.catalog import get_detectors, run_detectors
from mirl.detectors.registry import DETECTORS
from mirl.records.trajectory import Step, Trajectory

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
BINARY = "\ufffd\x00\x01PK\x03\x04\ufffd\ufffd\x00\x00\x13\x08\ufffd" * 4
PS_LINE = "root      4242  0.3  1.2 112000 48000 ?  S  10:01  0:02 /usr/bin/python3 /app/server.py --port 8000\n"


def traj(*steps) -> Trajectory:
    """Steps as (command, exit_code, output) tuples; None command = no runnable command."""
    return Trajectory(task="t", seed=0, models={}, steps=[Step(reasoning="", command=c, exit_code=rc, output=out) for c, rc, out in steps])


def flagged(name: str, t: Trajectory) -> list[int]:
    return [f.step for f in DETECTORS[name](t)]


def test_registry_has_the_required_detectors_with_definitions():
    names = [d.name for d in get_detectors()]
    required = ["no-runnable-command", "retry-unchanged-after-failure", "recheck-unchanged-after-success",
                "binary-as-text", "broad-kill", "submit-without-check", "command-not-found"]
    assert [n for n in names if n in required] == required and "repeat-unchanged-after-success" in names
    for det in get_detectors():
        assert det.name == det.name.lower() and " " not in det.name
        assert "not" in det.definition and len(det.definition) > 80
    with pytest.raises(ValueError, match="unknown detector"):
        get_detectors(["no-such-rule"])


CASES = {
    "no-runnable-command": [
        (traj(("ls", 0, "a"), (None, None, "Please always provide EXACTLY ONE action"), ("cat a", 0, "x")), [1]),
        (traj(("ls", 0, ""), ("   ", None, "")), [1]),
        (traj(("ls", 0, ""), ("false", 1, "")), []),  # a failing command is still a command
        (traj(("ls", 0, ""), (SUBMIT, 0, "")), []),
    ],
    "retry-unchanged-after-failure": [
        (traj(("python3 run.py", 1, "Traceback"), ("python3 run.py", 1, "Traceback")), [1]),
        (traj(("make", 2, "error"), ("ls", 0, ""), ("cat Makefile", 0, ""), ("make", 2, "error")), [3]),  # reads only in between
        (traj(("sleep 60", None, ""), ("sleep 60", None, "")), []),  # polling
        (traj(("pytest", 1, "F"), ("sed -i s/a/b/ x.py", 0, ""), ("pytest", 0, ".")), []),  # edit in between
        (traj(("python3 run.py", 0, "ok"), ("python3 run.py", 0, "ok")), []),  # it did not fail
        (traj(("python3 run.py", 1, ""), ("python3 run.py --verbose", 1, "")), []),  # changed
        (traj(("nohup python3 srv.py > srv.log 2>&1 &", 0, ""), ("curl -s localhost:8000", 7, ""), ("curl -s localhost:8000", 0, "hi")), []),
    ],
    "recheck-unchanged-after-success": [
        (traj(("cat app.py", 0, "code"), ("cat app.py", 0, "code")), [1]),
        (traj(("ls /app", 0, "a"), ("grep -n x a", 0, "1:x"), ("ls  /app", 0, "a")), [2]),
        (traj(("cat app.py", 0, "code"), ("sed -i s/a/b/ app.py", 0, ""), ("cat app.py", 0, "code")), []),
        (traj(("cat app.py", 0, "code"), ("python3 app.py", 0, ""), ("cat app.py", 0, "code")), []),  # unknown effects
        (traj(("cat missing.txt", 1, "No such file"), ("cat missing.txt", 1, "No such file")), []),  # failed: other rule
        (traj(("nohup ./srv > srv.log &", 0, ""), ("tail srv.log", 0, "a"), ("tail srv.log", 0, "a b")), []),
        (traj(("echo hi", 0, "hi"), ("echo hi", 0, "hi")), []),  # not a check
    ],
    "repeat-unchanged-after-success": [
        (traj(("mkdir -p out/x", 0, ""), ("mkdir -p out/x", 0, ""), ("mkdir -p out/x", 0, "")), [1, 2]),
        (traj(("# 1.", 0, ""), ("# 1.", 0, "")), [1]),  # a no-op comment, looped
        (traj(("mkdir -p out", 0, ""), ("ls out", 0, ""), ("mkdir -p out", 0, "")), [2]),  # only a read between
        (traj(("python3 r.py", 0, "1"), ("sed -i s/a/b/ f.py", 0, ""), ("python3 r.py", 0, "2")), []),  # re-run after an edit
        (traj(("make", 2, "err"), ("make", 2, "err")), []),  # failed: the retry rule's case
        (traj(("cat a", 0, "x"), ("cat a", 0, "x")), []),  # a check: the recheck rule's case
        (traj(("sleep 2", 0, ""), ("sleep 2", 0, "")), []),  # waiting
        (traj(("cp a b", 0, ""), ("cp a c", 0, "")), []),  # changed
    ],
    "binary-as-text": [
        (traj(("file data.bin", 0, "data.bin: data\n"), ("cat data.bin", 0, "PK")), [1]),
        (traj(("file /app/prog", 0, "/app/prog: ELF 64-bit LSB pie executable, x86-64\n"), ("head -n 5 prog", 0, "ELF")), [1]),
        (traj(("cat blob", 0, BINARY),), [0]),  # the printout itself is unprintable
        (traj(("cat blob", 0, BINARY), ("ls", 0, ""), ("tail -n 3 blob", 0, "PK")), [0, 2]),  # known from earlier bytes
        (traj(("cat archive.tar.gz", 0, "x"),), [0]),  # binary by type
        (traj(("file data.bin", 0, "data.bin: data\n"), ("xxd data.bin | head", 0, "00000000: 504b")), []),
        (traj(("file data.bin", 0, "data.bin: data\n"), ("head -c 64 data.bin | xxd", 0, "00000000: 504b")), []),
        (traj(("file notes", 0, "notes: ASCII text\n"), ("cat notes", 0, "hello")), []),
        (traj(("cat README.md", 0, "# Title\nsome text\n"),), []),
    ],
    "broad-kill": [
        (traj(("pkill python", 0, ""),), [0]),
        (traj(("killall node", 0, ""),), [0]),
        (traj(("pkill -9 -f server", 0, ""),), [0]),
        (traj(("kill $(pgrep -f server.py)", 0, ""),), [0]),
        (traj(("kill -9 $(lsof -t -i:8000)", 0, ""),), [0]),
        (traj(("ps aux | grep server | awk '{print $2}' | xargs kill", 0, ""),), [0]),
        (traj(("kill -9 -1", 0, ""),), [0]),
        (traj(("ps aux | grep server.py", 0, PS_LINE), ("pkill -f server.py", 0, "")), []),  # identified first
        (traj(("pgrep -a python", 0, "4242 /usr/bin/python3 /app/server.py\n"), ("kill 4242", 0, "")), []),
        (traj(("kill 4242", 0, ""),), []),  # explicit PID
        (traj(("kill %1", 0, ""),), []),
        (traj(("kill $(cat /run/app.pid)", 0, ""),), []),  # pid file
        (traj(("pgrep python", 0, "4242\n"), ("pkill python", 0, "")), [1]),  # bare PIDs do not say which process
        (traj(("kill -HUP 1234", 0, ""),), []),
        (traj(("pgrep python | xargs -n 1 kill", 0, ""),), [0]),  # an xargs option with its value
        (traj(("kill -0 $(pgrep nginx) && echo running", 0, ""),), []),  # signal 0: a probe, nothing killed
        (traj(("pkill -0 -f gunicorn", 0, ""),), []),
        (traj(("kill -s 0 $(pidof redis-server)", 0, ""),), []),
        (traj(("kill -9 $(jobs -p)", 0, ""),), []),  # the shell's own jobs
        (traj(("grep -rn 'kill $(pgrep' docs/", 0, ""),), []),  # the text of a search, not a kill
        (traj(("pkill -s 0 -f server", 0, ""),), [0]),  # pkill's -s is a session: this kills
        (traj(("kill -0 $(pgrep nginx) && kill -9 1234", 0, ""),), []),  # a probe, then an explicit PID
        (traj(("kill -0 $(pgrep a) && kill $(pgrep b)", 0, ""),), [0]),  # a probe, then a broad kill
    ],
    "submit-without-check": [
        (traj(("sed -i s/a/b/ app.py", 0, ""), (SUBMIT, 0, "")), [1]),
        (traj(("cat > out.txt <<'EOF'\n42\nEOF", 0, ""), (SUBMIT, 0, "")), [1]),
        (traj(("echo 42 > out.txt && " + SUBMIT, 0, ""),), [0]),
        (traj(("ls", 0, ""), ("echo 42 > out.txt", 0, ""), ("cat out.txt", 0, "42"), (SUBMIT, 0, "")), []),
        (traj(("sed -i s/a/b/ app.py", 0, ""), ("pytest -q", 1, "F"), (SUBMIT, 0, "")), []),  # checked (even failing)
        (traj(("echo 42 > out.txt && cat out.txt", 0, "42"), (SUBMIT, 0, "")), []),
        (traj(("ls", 0, ""), (SUBMIT, 0, "")), []),  # nothing changed
        (traj(("cat x", 0, ""), ("pkill -f srv", 0, ""), (SUBMIT, 0, "")), []),  # cleanup is not a change to check
        (traj(("python3 gen.py", 0, "wrote 3 rows"), (SUBMIT, 0, "")), []),  # running a program shows its result
        # tidying up after a passing check is not a change to check
        (traj(("sed -i s/a/b/ app.py", 0, ""), ("pytest -q", 0, "ok"), ("rm repro.py test_x.py", 0, ""), (SUBMIT, 0, "")), []),
        (traj(("sed -i s/a/b/ app.py", 0, ""), ("pytest -q", 0, "ok"), ("git checkout tests/test_app.py", 0, ""),
              (SUBMIT, 0, "")), []),
        (traj(("sed -i s/a/b/ app.py", 0, ""), ("pytest -q", 0, "ok"), ("git diff > patch.txt", 0, ""), (SUBMIT, 0, "")), []),
        (traj(("pytest -q", 0, "ok"), ("rm -rf reproduction\n" + SUBMIT, 0, "")), []),
        # ... but an edit after the check, or a new file the submission will carry, still is
        (traj(("pytest -q", 0, "ok"), ("rm x.py", 0, ""), ("sed -i s/b/c/ app.py", 0, ""), (SUBMIT, 0, "")), [3]),
        (traj(("pytest -q", 0, "ok"), ("cat > repro.py <<'EOF'\nprint(1)\nEOF", 0, ""), (SUBMIT, 0, "")), [2]),
    ],
    "command-not-found": [
        (traj(("python run.py", 127, "bash: python: command not found\n"), ("python3 run.py", 0, "ok")), [0]),
        (traj(("sudo -u app ls", 127, "/usr/bin/bash: line 1: sudo: command not found\n")), [0]),
        (traj(("./build.sh", 127, "bash: ./build.sh: No such file or directory\n")), [0]),  # a script path
        (traj(("jq . d.json", None, "sh: 1: jq: not found\n")), [0]),  # no exit code: the shell's words
        (traj(("which jq", 1, ""), ("command -v jq", 1, ""), ("type jq", 1, "bash: type: jq: not found\n")), []),
        (traj(("jq . d.json || python3 -m json.tool d.json", 0, "bash: jq: command not found\n{}")), []),  # handled
        (traj(("cat notes.txt", 0, "bash: x: command not found\n")), []),  # a file that says it, read
        (traj(("cat missing.txt", 1, "cat: missing.txt: No such file or directory")), []),  # ran and failed
        (traj((None, None, "bash: x: command not found")), []),  # no command: another rule's case
    ],
}


def test_a_task_complete_tool_call_is_a_submission():
    t = traj(("sed -i s/a/b/ app.py", 0, ""), ("tool:mark_task_complete", None, ""))
    assert flagged("submit-without-check", t) == []  # without the mark it is an unknown program, i.e. a check
    t.steps[1].meta["submission"] = True
    assert flagged("submit-without-check", t) == [1]
    assert flagged("no-runnable-command", t) == []


def test_empty_keystrokes_are_waiting_not_a_missing_command():
    t = traj(("make", 0, ""), ("", None, ""))
    assert flagged("no-runnable-command", t) == [1]
    t.steps[1].meta["wait"] = True
    assert flagged("no-runnable-command", t) == []


@pytest.mark.parametrize("name, t, expected", [(n, t, e) for n, cases in CASES.items() for t, e in cases],
                         ids=[f"{n}-{i}" for n, cases in CASES.items() for i in range(len(cases))])
def test_detector_cases(name, t, expected):
    assert flagged(name, t) == expected


def test_every_detector_has_positive_and_negative_cases():
    for det in get_detectors():
        cases = CASES[det.name]
        assert any(e for _, e in cases) and any(not e for _, e in cases), det.name


def test_findings_carry_command_and_evidence():
    t = traj(("python3 run.py", 1, "boom"), ("python3 run.py", 1, "boom"))
    [f] = run_detectors(t, get_detectors(["retry-unchanged-after-failure"]), file="x.jsonl")
    assert (f.file, f.step, f.command, f.detector) == ("x.jsonl", 1, "python3 run.py", "retry-unchanged-after-failure")
    assert "step 0" in f.evidence and "exited 1" in f.evidence


def test_nonprintable_ratio():
    assert rules.nonprintable_ratio("hello\nworld\t!") == 0
    assert rules.nonprintable_ratio("ab\x85\x7f") == 0.5  # C1 controls and DEL
    assert rules.nonprintable_ratio("\ufffd\x00ok\r\n") == 2 / 6  # replacement char and NUL; CR/LF are text
    assert rules.looks_binary(BINARY)
    assert rules.looks_binary("\x00" * 4 + "a" * 12) and not rules.looks_binary("\x00" * 3 + "a" * 13)  # a quarter
    assert not rules.looks_binary("\x00" * 15)  # too short to judge
    assert not rules.looks_binary("plain text, accents: é ü, and CJK 漢字 are printable" * 2)
