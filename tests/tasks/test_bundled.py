"""The proof the bundled suite is right: oracle scores 1 and noop scores 0, on bwrap and in containers."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirl.tasks import find_tasks, load_task
from mirl.sandbox.trivial import run_trivial

REPO = Path(__file__).resolve().parents[2]
BUNDLED = find_tasks(REPO / "tasks")


def test_suite_size_and_shape():
    tasks = [load_task(p) for p in BUNDLED]
    assert len(tasks) >= 40
    assert all(t.solution is not None for t in tasks), "every bundled task ships solution/solve.sh"
    assert {t.difficulty for t in tasks} == {"easy", "medium", "hard"}
    tempting = [t for t in tasks if any(str(tag).startswith("tempts:") for tag in t.metadata.get("tags", []))]
    assert len(tempting) >= 8
    assert not any(t.allow_internet for t in tasks)


def test_tests_never_read_the_solution():
    for path in BUNDLED:
        for f in (path / "tests").rglob("*"):
            if f.is_file():
                text = f.read_text(errors="replace")
                assert "solution/" not in text and "solve.sh" not in text, f"{f} refers to the solution"


@pytest.fixture(scope="module", params=["bwrap", "docker"])
def backend(request):
    """Each real backend; an unavailable one fails under the README's set-up (see tests/real.py)."""
    return request.getfixturevalue(f"{request.param}_sandbox")


@pytest.mark.slow
@pytest.mark.parametrize("path", BUNDLED, ids=[p.name for p in BUNDLED])
def test_oracle_one_noop_zero(backend, path):
    task = load_task(path)
    oracle = run_trivial(task, "oracle", backend)
    assert oracle.error is None, oracle.error
    assert oracle.reward == 1.0, f"oracle on {backend.name}: {oracle.verifier_tail[-1500:]}\n{oracle.agent_output[-1500:]}"
    noop = run_trivial(task, "noop", backend)
    assert noop.error is None, noop.error
    assert noop.reward == 0.0, f"noop on {backend.name} passed the tests untouched: {noop.verifier_tail[-800:]}"
