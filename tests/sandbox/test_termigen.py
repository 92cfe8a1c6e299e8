"""Real external tasks (TermiGen, Harbor format) load, build on the local base image and score 0 untouched.

The tasks chosen install nothing beyond the common prelude every TermiGen Dockerfile shares (apt
python3-pip, pip pytest/pandas/scipy), so after the first build the engine's layer cache makes
each one a few seconds. Set MIRL_TERMIGEN to the collection's directory when it is not at
../shared/external/termigen next to the repository.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.podman, pytest.mark.slow, pytest.mark.timeout(1800)]

TERMIGEN = Path(os.environ.get("MIRL_TERMIGEN") or Path(__file__).resolve().parents[3] / "shared" / "external" / "termigen")
FAST_TASKS = [
    "amplitude_event_deduplication_hard",
    "base64_invalid_input_padding_medium",
    "bishop_knight_checkmate_hard",
    "bitboard_move_generation_hard",
    "calico_network_policy_blocking_traffic_medium",
    "cloudwatch_logs_insights_query_medium",
    "count_min_sketch_frequency_medium",
    "expression_evaluation_shunting_hard",
    "fenwick_tree_prefix_sums_hard",
    "hamiltonian_cycle_detection_medium",
    "json_streaming_large_files_medium",
]


@pytest.fixture(scope="module")
def termigen():
    if not TERMIGEN.is_dir():
        pytest.skip(f"TermiGen tasks not found at {TERMIGEN} (set MIRL_TERMIGEN)")
    return TERMIGEN


@pytest.mark.parametrize("name", FAST_TASKS)
def test_task_loads_builds_and_scores_zero_untouched(termigen, docker_sandbox, name):
    from mirl.tasks import load_task

    task = load_task(termigen / name)
    assert task.instruction.strip() and task.dockerfile is not None
    image = docker_sandbox.image_for(task)
    assert image.startswith("mirl-task-")
    with docker_sandbox.start(task) as session:
        assert session.run("pwd").output.strip() == task.workdir
        result = session.verify()
    assert result.error is None, result.tail
    assert result.reward == 0.0, f"untouched {name} already passes its tests:\n{result.tail}"
    assert result.exit_code != 0
