"""The shell-aware classifier that tells read-only checks from state changes."""

import pytest

from mirl.detectors.shell import (
    EXEC,
    NEUTRAL,
    READ,
    TEST,
    WRITE,
    classify,
    is_submit,
    normalize,
    same_path,
    strip_heredocs,
    tokenize,
)


@pytest.mark.parametrize(
    "command, kinds",
    [
        ("ls -la", [READ]),
        ("cat a.txt | grep foo | wc -l", [READ, READ, READ]),
        ("cat a.txt > /dev/null 2>&1", [READ]),
        ("echo hi > out.txt", [WRITE]),
        ("echo hi >> out.txt", [WRITE]),
        ("grep -rn TODO . | tee todo.txt", [READ, WRITE]),
        ("sed -i 's/a/b/' f.py", [WRITE]),
        ("sed -n '1,20p' f.py", [READ]),
        ("find . -name '*.pyc' -delete", [WRITE]),
        ("find . -name '*.py'", [READ]),
        ("pytest -q tests/", [TEST]),
        ("cd /app && python3 -m pytest -x", [NEUTRAL, TEST]),
        ("python3 solve.py", [EXEC]),
        ("python3 -m pip install requests", [WRITE]),
        ("pip list", [READ]),
        ("pip install -r requirements.txt", [WRITE]),
        ("git status && git diff HEAD", [READ, READ]),
        ("git commit -am fix", [WRITE]),
        ("git branch feature", [WRITE]),
        ("sudo timeout 10 cat /etc/hosts", [READ]),
        ("FOO=1 BAR=2 ./run_tests.sh", [TEST]),
        ("bash -c 'cat x'", [READ]),
        ("bash -c 'rm -rf build'", [WRITE]),
        ("curl -s http://localhost:8000/health", [READ]),
        ("curl -s -X POST -d '{}' http://localhost:8000/items", [WRITE]),
        ("curl -sL -o pkg.tgz http://example.com/pkg.tgz", [WRITE]),
        ("curl -sLO http://example.com/pkg.tgz", [WRITE]),  # a writing option inside a cluster
        ("curl -fsSLo pkg.tgz http://example.com/pkg.tgz", [WRITE]),
        ("curl -XPOST http://localhost:8000/items", [WRITE]),
        ("curl -XGET http://localhost:8000/items", [READ]),
        ("curl -HAccept:text/plain http://localhost:8000/", [READ]),  # -H's value is not a cluster
        ("sed -Ei 's/bug/fix/' app.py", [WRITE]),
        ("sed -ri 's/a/b/' f", [WRITE]),
        ("sed -es/i/j/ f", [READ]),  # the i is the script's
        ("yq -i '.a = 1' f.yaml", [WRITE]),
        ("perl -Mstrict -we 'print 1'", [EXEC]),  # -M takes a value: no in-place cluster
        ("perl -pi -e 's/a/b/' f", [WRITE]),
        ("[ -f /app/out.txt ] && echo yes", [TEST, NEUTRAL]),
        ("for f in *.txt; do wc -l $f; done", [READ]),
        ("if [ -f x ]; then rm x; fi", [TEST, WRITE]),
        ("make test", [TEST]),
        ("make", [WRITE]),
        ("some-unknown-tool --flag", [EXEC]),
        ("echo '# not a comment' > notes.md  # a comment", [WRITE]),
    ],
)
def test_segment_kinds(command, kinds):
    assert [s.kind for s in classify(command).segments] == kinds


def test_heredoc_body_is_data_not_commands():
    cmd = "cat <<'EOF' > /app/fix.py\nimport os; os.remove('x')\nrm -rf /\nit's fine\nEOF\ncat /app/fix.py"
    text, bodies = strip_heredocs(cmd)
    assert "rm -rf" not in text and "rm -rf /" in bodies[0]
    c = classify(cmd)
    assert [s.program for s in c.segments] == ["cat", "cat"]
    assert c.segments[0].writes == ("/app/fix.py",)
    assert c.changes_state and c.checks_after_change


def test_command_level_properties():
    assert classify("ls && cat x").read_only
    assert not classify("ls && rm x").read_only
    assert classify("python gen.py").changes_state  # unknown effects count as changes
    assert not classify("sed -i s/a/b/ f").checks_after_change
    assert classify("sed -i s/a/b/ f && cat f").checks_after_change
    assert classify("nohup python3 -m http.server 8000 > log 2>&1 &").starts_background
    assert classify("sleep 5 &").starts_background
    assert not classify("ls").starts_background
    assert classify("").segments == ()


def test_pipes_record_the_next_program():
    seg = classify("head -c 64 blob.bin | xxd").segments[0]
    assert seg.program == "head" and seg.piped_to == "xxd"


def test_unbalanced_quotes_do_not_crash():
    c = classify("echo 'unterminated && rm -rf x")
    # falls back to a plain split: still two segments, and the rm still counts as a change
    assert [s.program for s in c.segments] == ["echo", "rm"] and c.segments[1].kind == WRITE and c.changes_state


def test_tokenize_keeps_hash_inside_words_and_quotes():
    assert tokenize("echo a#b '#c' ${#x} # gone") == ["echo", "a#b", "#c", "${#x}"]


def test_helpers():
    assert is_submit("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    assert not is_submit("echo done")
    assert normalize("cd /app &&   ls\n") == "cd /app && ls"
    assert same_path("./data.bin", "data.bin")
    assert same_path("/app/data.bin", "data.bin")
    assert not same_path("/app/a.bin", "b.bin")
    assert not same_path("/app/a.bin", "../a.bin")
