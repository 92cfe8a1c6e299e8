"""Replaying the teacher's steps one fresh shell at a time must still solve the task (real bwrap sandbox)."""

from pathlib import Path

import pytest

from mirl.roles.reference_teacher import ReferenceTeacher
from mirl.tasks import load_task

REPO = Path(__file__).resolve().parents[2]
# solutions that lean on shell state across lines: cd + set -e, variables set in loops, PIDs, background services
TASKS = ["git-revert-bad-commit", "stop-one-worker", "start-health-service", "c-fix-compile-errors", "git-recover-deleted-file"]


@pytest.mark.bwrap
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", TASKS)
def test_step_by_step_replay_passes_the_verifier(name, bwrap_sandbox):
    root = REPO / "tasks" / name
    assert (root / "solution" / "solve.sh").is_file(), f"bundled task {name} lost its solution/solve.sh"
    task = load_task(root)
    teacher = ReferenceTeacher()
    history = []
    with bwrap_sandbox.start(task) as session:
        while (step := teacher.propose(task, history)) is not None:
            result = session.run(step.command)
            step.output, step.exit_code = result.output, result.exit_code
            history.append(step)
            assert result.exit_code == 0, f"{step.command}\n{result.output}"
        verdict = session.verify()
    assert len(history) >= 2
    assert verdict.reward == 1.0, verdict.tail
