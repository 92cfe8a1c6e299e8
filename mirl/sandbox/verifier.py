"""The one verification rule every backend follows: run the task's tests, turn their files into a reward.

A backend provides `put_tests` (empty `/logs/verifier`, copy `tests/` to a fresh `/tests`, after
the agent is done; with a multi-step task's step, that step's tests/ copied over them) and a
session with `run(command, timeout, env=...)` and `read_file(path)` (text or bytes, None when
absent); everything else is decided here, so the backends cannot drift:

- a verifier that outlives its timeout scores 0, whatever it wrote before hanging;
- `reward.json` is read before `reward.txt` (Harbor's order), for Terminal-Bench 1 tasks too;
- `reward.json` may hold several keys (`{"tests": 1, "style": 0.5}`): every key is kept in
  `VerifyResult.rewards` and `SandboxConfig.reward_key` makes them one reward: "mean" (Harbor's
  default), "all" (1 only when every key is 1) or the name of one key;
- an empty, NaN, infinite or non-numeric reward file scores 0, and `error` says which and why;
- a Terminal-Bench 1 task that writes no reward file scores 1 when its script exits 0;
- the task's `[verifier] env` (and the step's) is resolved from the host and set for the script.
"""

from __future__ import annotations

import json
import math
import os
import tarfile
import tempfile
from collections.abc import Callable

from mirl.sandbox.base import SandboxError, VerifyResult, tail_lines
from mirl.tasks import Task, TaskStep
from mirl.tasks.envvars import MissingVariable, resolve

REWARD_TXT = "/logs/verifier/reward.txt"
REWARD_JSON = "/logs/verifier/reward.json"
NO_REWARD = "no reward file written to /logs/verifier (reward.txt or reward.json)"
REWARD_KEYS = ("mean", "all")  # or the name of one key


# run inside the sandbox with the tar stream of `tar_of_tests` on stdin: /logs/verifier made afresh, /tests
# emptied in place (it may be a mount point) and refilled; a link or file a command left at either is removed,
# never followed (tests extracted through a link to the agent's folder would run beside its conftest.py)
PUT_TESTS = ("rm -rf /logs/verifier && mkdir -p /logs/verifier && chmod 777 /logs/verifier "
             "&& { [ -d /tests ] && [ ! -L /tests ] || rm -f /tests; } && mkdir -p /tests "
             "&& find /tests -mindepth 1 -maxdepth 1 -exec rm -rf {} + && tar -xf - -C /tests --no-same-owner")


def tar_of_tests(task: Task):
    """The task's tests (and a Terminal-Bench 1 task's script as run-tests.sh) as a tar stream in a
    temporary file, at its start, for `PUT_TESTS`; the caller closes it."""
    f = tempfile.TemporaryFile()
    with tarfile.open(fileobj=f, mode="w") as tf:
        if task.tests_dir.is_dir():  # a linked tests/ or run-tests.sh is read through (links inside stay links)
            tf.add(os.path.realpath(task.tests_dir), arcname=".")
        if task.layout == "terminal-bench":
            tf.add(os.path.realpath(task.test_script), arcname="run-tests.sh")
    f.seek(0)
    return f


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def parse_rewards(reward_txt: str | None, reward_json: str | None) -> tuple[dict[str, float], str | None]:
    """(every reward by key, error) from the verifier's files (None: absent); reward.json wins over reward.txt."""
    if reward_json is not None:
        text = reward_json.strip()
        if not text:
            return {}, "reward.json is empty"
        unusable = f"reward.json has no numeric reward: {text[:80]!r}"
        try:
            data = json.loads(text)
        except ValueError:
            return {}, unusable
        if not isinstance(data, dict):
            value = _number(data)
            return ({"reward": value}, None) if value is not None else ({}, unusable)
        rewards = {str(k): _number(v) for k, v in data.items()}
        bad = [k for k, v in rewards.items() if v is None]
        if not rewards or len(bad) == len(rewards):
            return {}, unusable
        if bad:  # one unusable key spoils the lot: a mean without it would overstate the reward
            return {}, f"reward.json has non-numeric rewards for {', '.join(bad)}: {text[:80]!r}"
        return rewards, None
    if reward_txt is not None:
        text = reward_txt.strip()
        if not text:
            return {}, "reward.txt is empty"
        try:
            value = _number(float(text.split()[0]))
        except ValueError:
            value = None
        if value is None:
            return {}, f"reward.txt is not a number: {text[:80]!r}"
        return {"reward": value}, None
    return {}, NO_REWARD


def score(rewards: dict[str, float], reward_key: str = "mean") -> tuple[float, str | None]:
    """One reward from several: their mean, 1 when all are 1 ("all"), or the value of the key named."""
    if not rewards:
        return 0.0, None
    if len(rewards) == 1 and "reward" in rewards:  # reward.txt, or {"reward": x}: nothing to choose
        return rewards["reward"], None
    if reward_key == "mean":
        return sum(rewards.values()) / len(rewards), None
    if reward_key == "all":
        return (1.0 if all(v == 1.0 for v in rewards.values()) else 0.0), None
    if reward_key in rewards:
        return rewards[reward_key], None
    return 0.0, f"reward.json has no key {reward_key!r} (sandbox.reward_key); it has {', '.join(sorted(rewards))}"


def parse_reward(reward_txt: str | None, reward_json: str | None, reward_key: str = "mean") -> tuple[float, str | None]:
    """(reward, error) from the verifier's files; see `parse_rewards` and `score`."""
    rewards, error = parse_rewards(reward_txt, reward_json)
    if error:
        return 0.0, error
    return score(rewards, reward_key)


def _text(data: str | bytes | None) -> str | None:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def verifier_env(task: Task, step: TaskStep | None = None) -> dict[str, str]:
    """The verifier's extra variables: TEST_DIR, the task's `[verifier] env` and the step's, resolved."""
    env = {"TEST_DIR": "/tests", **resolve(task.verifier_env, what=f"{task.id}: [verifier] env")}
    if step is not None:
        env.update(resolve(step.verifier_env, what=f"{task.id}: step {step.name} [steps.verifier] env"))
    return env


def run_verifier(session, put_tests: Callable[..., None], step: TaskStep | None = None) -> VerifyResult:
    """Verify the session's task, or one step of a multi-step task (`put_tests(step)` layers its tests)."""
    task, config = session.task, session.config
    try:
        env = verifier_env(task, step)
        put_tests() if step is None else put_tests(step)
    except (SandboxError, MissingVariable) as e:
        return VerifyResult(0.0, -1, 0.0, "", error=str(e))
    tb1 = task.layout == "terminal-bench"
    script = "/tests/run-tests.sh" if tb1 else "/tests/test.sh"
    timeout = step.verifier_timeout_s if step is not None else task.verifier_timeout_s
    res = session.run(f"bash {script}", timeout=timeout, env=env)
    tail = tail_lines(res.output, config.verifier_tail_lines)
    if res.timed_out:
        return VerifyResult(0.0, res.exit_code, res.duration_s, tail,
                            error=f"the verifier timed out after {timeout:g}s", timed_out=True)
    txt, js = _text(session.read_file(REWARD_TXT)), _text(session.read_file(REWARD_JSON))
    if tb1 and txt is None and js is None:
        return VerifyResult(1.0 if res.exit_code == 0 else 0.0, res.exit_code, res.duration_s, tail)
    rewards, error = parse_rewards(txt, js)
    reward, key_error = (0.0, None) if error else score(rewards, getattr(config, "reward_key", "mean"))
    return VerifyResult(reward, res.exit_code, res.duration_s, tail, error=error or key_error, rewards=rewards)


def combine_steps(task: Task, results: list[tuple[str, VerifyResult]]) -> VerifyResult:
    """The task's result from its steps' (name, result) in order: the mean over all of the task's steps
    (a step not reached scores 0, as in Harbor) or the final step's reward (`multi_step_reward_strategy`)."""
    per_step = [{"step": name, "reward": r.reward, "rewards": r.rewards, "error": r.error, "exit_code": r.exit_code,
                 "timed_out": r.timed_out} for name, r in results]
    if task.step_reward == "final":
        reward = results[-1][1].reward if len(results) == len(task.steps) else 0.0
    else:
        reward = sum(r.reward for _, r in results) / max(1, len(task.steps))
    last = results[-1][1] if results else VerifyResult(0.0, -1, 0.0, "")
    errors = [f"step {name}: {r.error}" for name, r in results if r.error]
    if len(results) < len(task.steps):
        errors.append(f"stopped after step {results[-1][0] if results else '-'}: "
                      f"{len(task.steps) - len(results)} of {len(task.steps)} steps not run")
    return VerifyResult(reward, last.exit_code, round(sum(r.duration_s for _, r in results), 3), last.tail,
                        error="; ".join(errors) or None, timed_out=any(r.timed_out for _, r in results), steps=per_step)
