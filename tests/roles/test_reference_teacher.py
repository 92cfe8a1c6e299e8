"""The reference-solution teacher: splitting solve.sh into replayable steps and proposing them in order."""

import subprocess
from pathlib import Path

import pytest

from mirl.records.trajectory import Step
from mirl.roles.reference_teacher import ReferenceTeacher, TeacherUnavailable, plan_steps, split_statements
from mirl.tasks import find_tasks, load_task

REPO = Path(__file__).resolve().parents[2]
SOLUTIONS = sorted((REPO / "tasks").glob("*/solution/solve.sh"))

TRICKY = r"""#!/bin/bash
# prepare
set -euo pipefail
cd /app
export MODE=fast
apt-get install -y \
    jq \
    curl
cat > conf.ini <<'EOF'
[a]
x = "it's # not a comment"
EOF
if [ -f old.txt ]; then
  rm old.txt
fi
for f in *.log; do
  gzip "$f"
done
helper() {
  echo "$1" >> log.txt
}
helper one
python3 - <<PY
print("heredoc with $MODE")
PY
while read -r line; do echo "$line"; done < input.txt
echo building &&
  make
case "$MODE" in
  fast) echo f ;;
  *) echo s ;;
esac
count=$(wc -l < input.txt)
echo "lines: $count" > count.txt
cat <<-END | tr a-z A-Z > upper.txt
	tabbed body
	END
echo done
"""


def _bash_ok(text: str) -> bool:
    proc = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    return proc.returncode == 0 and "here-document" not in proc.stderr


def test_split_keeps_multiline_constructs_whole():
    statements = split_statements(TRICKY)
    texts = [s.text for s in statements]
    # by hand: set, cd, export, apt-get, cat heredoc, if, for, helper(), helper one, python3 heredoc, while,
    # echo building && make, case, count=, echo lines, cat <<-END, echo done
    assert len(texts) == 17
    assert texts[:3] == ["set -euo pipefail", "cd /app", "export MODE=fast"]
    assert texts[3].startswith("apt-get install -y \\") and texts[3].endswith("curl")
    assert texts[4].startswith("cat > conf.ini <<'EOF'") and texts[4].endswith("EOF")
    assert texts[5].startswith("if [ -f old.txt ]") and texts[5].endswith("fi")
    assert texts[6].startswith("for f in") and texts[6].endswith("done")
    assert texts[7].startswith("helper() {") and texts[7].endswith("}")
    assert any(t.startswith("python3 - <<PY") and t.endswith("PY") for t in texts)
    assert any(t.startswith("echo building &&") and t.endswith("make") for t in texts)
    assert any(t.startswith("case ") and t.endswith("esac") for t in texts)
    assert any(t.startswith("cat <<-END") and t.endswith("\tEND") for t in texts)
    assert statements[0].comment == "prepare"
    assert all(_bash_ok(t) for t in texts)


def test_plan_repeats_context_and_merges_shared_variables():
    steps = plan_steps(TRICKY)
    statements = [s.statement for s in steps]
    assert not any(s in {"set -euo pipefail", "cd /app", "export MODE=fast"} for s in statements)  # context, not steps
    assert all(s.command.startswith("set -euo pipefail\ncd /app\nexport MODE=fast\n") for s in steps)
    helper_step = next(s for s in steps if s.statement == "helper one")
    assert "helper() {" in helper_step.command  # functions travel with later steps
    count_step = next(s for s in steps if s.statement.startswith("count=$(wc -l"))
    assert 'echo "lines: $count" > count.txt' in count_step.statement  # one step: a fresh shell would lose $count
    assert not any(s.statement == "echo done" for s in steps)  # pure messages are not steps
    assert steps[0].note == "prepare"


@pytest.mark.parametrize("solve", SOLUTIONS, ids=[p.parent.parent.name for p in SOLUTIONS])
def test_every_bundled_solution_splits_into_valid_steps(solve):
    script = solve.read_text()
    steps = plan_steps(script)
    assert steps, "a solution with no steps"
    for step in steps:
        assert _bash_ok(step.command), step.command
    # nothing of the script is lost: every line that does something appears in some step
    joined = "\n".join(s.command for s in steps)
    for line in script.splitlines():
        s = line.strip()
        if s and not s.startswith("#") and not s.startswith(("echo ", "printf ", "exit")):
            assert s in joined, s


def _task_with_solution(tmp_path, script: str | None):
    root = tmp_path / "demo-task"
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "instruction.md").write_text("Do the thing.\n")
    (root / "task.toml").write_text('version = "1.0"\n')
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm\nWORKDIR /app\n")
    (root / "tests" / "test.sh").write_text("#!/bin/bash\nexit 0\n")
    if script is not None:
        (root / "solution").mkdir()
        (root / "solution" / "solve.sh").write_text(script)
    return load_task(root)


def test_propose_replays_steps_in_order_then_none(tmp_path):
    task = _task_with_solution(tmp_path, "#!/bin/bash\ncd /app\necho hi > a.txt\ncat a.txt\n")
    teacher = ReferenceTeacher()
    history: list[Step] = []
    proposed = []
    while (step := teacher.propose(task, history, episode="e1")) is not None:
        assert step.source == "teacher" and step.reasoning.startswith("Following the reference solution")
        proposed.append(step.command)
        history.append(step)
        assert len(proposed) < 10
    assert proposed == ["cd /app\necho hi > a.txt", "cd /app\ncat a.txt"]


def test_progress_is_kept_per_episode_and_read_from_history(tmp_path):
    task = _task_with_solution(tmp_path, "touch a\ntouch b\ntouch c\n")
    teacher = ReferenceTeacher()
    assert teacher.propose(task, [], episode="e1").command == "touch a"
    assert teacher.propose(task, [], episode="e1").command == "touch b"  # episode state remembers
    assert teacher.propose(task, [], episode="e2").command == "touch a"  # other episode starts fresh
    # policy steps in between do not count; a new teacher resumes from the history's markers
    first = ReferenceTeacher().propose(task, [])
    history = [first, Step(reasoning="mine", command="ls")]
    assert ReferenceTeacher().propose(task, history).command == "touch b"
    teacher.reset("e1")
    assert teacher.propose(task, [], episode="e1").command == "touch a"


def test_task_without_solution_is_a_clear_error(tmp_path):
    task = _task_with_solution(tmp_path, None)
    with pytest.raises(TeacherUnavailable, match="no reference solution"):
        ReferenceTeacher().propose(task, [])


@pytest.mark.skipif(not SOLUTIONS, reason="no bundled tasks with solutions")
def test_bundled_tasks_through_the_loader():
    teacher = ReferenceTeacher()
    proposed = 0
    for path in find_tasks(REPO / "tasks"):
        task = load_task(path)
        if task.solution is None:
            continue
        first = teacher.propose(task, [])
        assert first is not None and first.command.strip(), task.id
        proposed += 1
    assert proposed == len(SOLUTIONS)
