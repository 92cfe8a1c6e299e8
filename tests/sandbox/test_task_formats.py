"""The sandbox side of the task formats: rewards of several keys, env tables, resource fields left
unset, FROM --platform=, Terminal-Bench 1's default runner and multi-step tasks, on real backends."""

from __future__ import annotations

import json

import pytest

from mirl.sandbox.base import SandboxConfig, SandboxError
from mirl.sandbox.trivial import run_trivial
from mirl.sandbox.verifier import parse_rewards, score
from mirl.tasks import load_task
from tests.conftest import write_task
from tests.tasks.test_harbor_task_formats import write_multi_step
from tests.tasks.test_loader import write_tb1

pytestmark = pytest.mark.timeout(300)

REWARD_JSON = "/logs/verifier/reward.json"


# --- reward.json with several keys ----------------------------------------------------------------

def test_several_keys_are_all_kept_and_scored_by_the_chosen_rule():
    rewards, error = parse_rewards("0.9", json.dumps({"tests": 1, "style": 0.5, "lint": 0}))
    assert (rewards, error) == ({"tests": 1.0, "style": 0.5, "lint": 0.0}, None)  # reward.json wins over .txt
    assert score(rewards, "mean") == (0.5, None)
    assert score(rewards, "all") == (0.0, None)
    assert score({"tests": 1.0, "style": 1.0}, "all") == (1.0, None)
    assert score(rewards, "style") == (0.5, None)
    assert score(rewards, "speed") == (0.0, "reward.json has no key 'speed' (sandbox.reward_key); it has lint, style, tests")
    assert score({"reward": 0.25}, "speed") == (0.25, None)  # one plain reward: nothing to choose between


def test_one_unusable_key_spoils_the_reward():
    text = '{"tests": 1, "style": "good"}'
    assert parse_rewards(None, text) == ({}, f"reward.json has non-numeric rewards for style: {text!r}")


def test_reward_key_must_be_set():
    with pytest.raises(ValueError, match="sandbox.reward_key"):
        SandboxConfig(reward_key=" ")


@pytest.mark.parametrize("reward_key, expected, error", [
    ("mean", 0.5, None),
    ("all", 0.0, None),
    ("style", 0.25, None),
    ("speed", 0.0, "reward.json has no key 'speed' (sandbox.reward_key); it has style, tests"),
])
def test_verify_scores_a_multi_key_reward_json(docker_sandbox, task_factory, reward_key, expected, error):
    from mirl.sandbox.docker_backend import DockerSandbox

    script = f"#!/bin/bash\necho '{{\"tests\": 0.75, \"style\": 0.25}}' > {REWARD_JSON}\n"
    task = task_factory("multi-key", test_sh=script)
    box = DockerSandbox(SandboxConfig(backend="docker", reward_key=reward_key), client=docker_sandbox.client)
    with box.start(task) as s:
        v = s.verify()
    assert (v.reward, v.error) == (expected, error), v
    assert v.rewards == {"tests": 0.75, "style": 0.25}


# --- env tables applied ----------------------------------------------------------------------------

ENV_TOML = """[verifier]
timeout_sec = 60.0
[verifier.env]
EXPECTED = "${MIRL_TEST_SECRET}-checked"
[environment.env]
SECRET = "${MIRL_TEST_SECRET}"
LEVEL = "${MIRL_TEST_UNSET_LEVEL:-3}"
"""
ENV_TEST = """#!/bin/bash
if [ "$EXPECTED" = "s3cr3t-checked" ] && [ "$SECRET" = "s3cr3t" ] && [ "$LEVEL" = 3 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def test_environment_and_verifier_env_are_applied(sandbox, task_factory, monkeypatch):
    monkeypatch.setenv("MIRL_TEST_SECRET", "s3cr3t")
    monkeypatch.delenv("MIRL_TEST_UNSET_LEVEL", raising=False)
    task = task_factory("env-tables", toml=ENV_TOML, test_sh=ENV_TEST)
    assert "s3cr3t" not in repr(task)  # resolved when a session starts, not stored in the record
    with sandbox.start(task) as s:
        seen = s.run('echo "$SECRET/$LEVEL/${EXPECTED:-none}"').output.strip()
        v = s.verify()
    assert seen == "s3cr3t/3/none"  # the verifier's env is the verifier's alone
    assert (v.reward, v.error) == (1.0, None), v


def test_unset_host_variable_refuses_the_session_naming_it(docker_sandbox, task_factory, monkeypatch):
    monkeypatch.delenv("MIRL_TEST_SECRET", raising=False)
    task = task_factory("env-missing", toml=ENV_TOML, test_sh=ENV_TEST)
    with pytest.raises(SandboxError, match=r"env-missing: \[environment\] env needs the host variable\(s\) MIRL_TEST_SECRET"):
        docker_sandbox.start(task)


def test_compose_environment_of_the_main_service_is_applied(docker_sandbox, tmp_path):
    root = write_task(tmp_path / "compose-env")
    (root / "environment" / "docker-compose.yaml").write_text(
        "services:\n  main:\n    build: .\n    environment:\n      - MODE=strict\n")
    with docker_sandbox.start(load_task(root)) as s:
        assert s.run("echo $MODE").output.strip() == "strict"


# --- resources: unset stays unlimited, set is applied ---------------------------------------------------

@pytest.mark.parametrize("toml, nano_cpus, memory", [
    ("[verifier]\ntimeout_sec = 60.0\n", 0, 0),
    ("[environment]\ncpus = 2\nmemory_mb = 768\n", 2_000_000_000, 768 * 2**20),
])
def test_cpus_and_memory_are_limits_only_when_set(docker_sandbox, task_factory, toml, nano_cpus, memory):
    with docker_sandbox.start(task_factory("limits", toml=toml)) as s:
        s.container.reload()
        host = s.container.attrs["HostConfig"]
    assert (host.get("NanoCpus") or 0, host.get("Memory") or 0) == (nano_cpus, memory)


# --- FROM --platform= --------------------------------------------------------------------------------

def test_from_platform_image_that_cannot_be_pulled_builds_on_the_base(docker_sandbox, task_factory):
    # a platform the local base image is not built for: the flag must go with the image it named
    dockerfile = "FROM --platform=linux/s390x ghcr.io/nowhere/unpullable-image:1.0\nWORKDIR /srv\nRUN echo built > marker\n"
    with docker_sandbox.start(task_factory("platform", dockerfile=dockerfile)) as s:
        assert s.run("cat marker; pwd").output.split() == ["built", "/srv"]


# --- Terminal-Bench 1 without run-tests.sh -----------------------------------------------------------

def test_tb1_default_runner_scores_oracle_one_noop_zero(docker_sandbox, tmp_path):
    root = write_tb1(tmp_path / "tb1-default")
    (root / "run-tests.sh").unlink()
    task = load_task(root)
    oracle, noop = run_trivial(task, "oracle", docker_sandbox), run_trivial(task, "noop", docker_sandbox)
    assert (oracle.error, oracle.reward) == (None, 1.0), oracle.verifier_tail
    assert (noop.error, noop.reward) == (None, 0.0), noop.verifier_tail
    assert "1 passed" in oracle.verifier_tail and "1 failed" in noop.verifier_tail


# --- multi-step tasks --------------------------------------------------------------------------------

def test_multi_step_oracle_runs_the_steps_in_order_in_one_container(docker_sandbox, tmp_path):
    task = load_task(write_multi_step(tmp_path / "two-steps"))
    run = run_trivial(task, "oracle", docker_sandbox)
    assert (run.error, run.verifier_error, run.reward) == (None, None, 1.0), run
    assert [(s["step"], s["reward"]) for s in run.steps] == [("create", 1.0), ("append", 1.0)]


def test_multi_step_stops_below_min_reward_and_counts_unrun_steps_as_zero(docker_sandbox, tmp_path):
    task = load_task(write_multi_step(tmp_path / "stops"))
    run = run_trivial(task, "noop", docker_sandbox)
    assert run.error is None and run.reward == 0.0
    assert [(s["step"], s["reward"]) for s in run.steps] == [("create", 0.0)]  # min_reward 1.0 ended it
    assert run.verifier_error == "stopped after step create: 1 of 2 steps not run"


def test_multi_step_mean_and_final_rewards(docker_sandbox, tmp_path):
    """Step one passes, step two fails: the mean is 0.5, the final step's reward 0."""
    for strategy, expected in (("mean", 0.5), ("final", 0.0)):
        root = write_multi_step(tmp_path / strategy, toml=(
            f'multi_step_reward_strategy = "{strategy}"\n[[steps]]\nname = "create"\n[[steps]]\nname = "append"\n'))
        (root / "steps" / "append" / "solution" / "solve.sh").write_text("echo three >> /app/log.txt\n")
        run = run_trivial(load_task(root), "oracle", docker_sandbox)
        assert [s["reward"] for s in run.steps] == [1.0, 0.0] and run.reward == expected, (strategy, run)


def test_a_steps_tests_are_layered_over_the_tasks_and_use_its_env(docker_sandbox, tmp_path):
    root = write_multi_step(tmp_path / "layered")
    (root / "tests" / "helper.sh").write_text("ok() { echo 1 > /logs/verifier/reward.txt; }\n")
    (root / "steps" / "append" / "tests" / "test.sh").write_text(
        '#!/bin/bash\nsource /tests/helper.sh\n[ "$STEP/$SHARED" = append/task ] && ok || echo 0 > /logs/verifier/reward.txt\n')
    task = load_task(root)
    with docker_sandbox.start(task) as s:
        v = s.verify(task.steps[1])
        left = sorted(s.run("ls /tests").output.split())
    assert (v.reward, v.error) == (1.0, None), v
    assert left == ["helper.sh", "test.sh"]


def test_bwrap_refuses_a_multi_step_task_naming_its_steps(bwrap_sandbox, tmp_path):
    task = load_task(write_multi_step(tmp_path / "two-steps"))
    with pytest.raises(SandboxError, match=r"has 2 steps \(create, append\); multi-step tasks run on the docker backend"):
        bwrap_sandbox.start(task)


def test_agent_loop_refuses_a_multi_step_task(docker_sandbox, tmp_path):
    from mirl.agent.episode import run_episode
    from tests.agent.agent_doubles import Scripted

    task = load_task(write_multi_step(tmp_path / "two-steps"))
    traj = run_episode(task, docker_sandbox, Scripted([]))
    assert traj.exit_reason == "error"
    assert traj.error == "ValueError: task two-steps has 2 steps; the agent loop plays single-step tasks only"


def test_combined_steps_count_steps_not_reached_as_zero(tmp_path):
    from mirl.sandbox.base import VerifyResult
    from mirl.sandbox.verifier import combine_steps

    task = load_task(write_multi_step(tmp_path / "partial"))
    half = VerifyResult(0.5, 0, 1.0, "", rewards={"reward": 0.5})
    combined = combine_steps(task, [("create", half)])
    assert combined.reward == 0.25  # (0.5 + 0 for the step never reached) / 2
    assert combined.steps == [{"step": "create", "reward": 0.5, "rewards": {"reward": 0.5}, "error": None,
                               "exit_code": 0, "timed_out": False}]
