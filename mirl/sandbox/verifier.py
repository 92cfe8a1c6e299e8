"""Running a task's tests in a session and turning their files into a reward (shared by backends).

A backend provides `put_tests` (copy `tests/` to `/tests` now, after the agent is done) and a
session with `run(command, timeout, env=...)` and `read_file(path)`; the rest is the same for all.
"""

from __future__ import annotations

from collections.abc import Callable

from mirl.sandbox.base import SandboxError, VerifyResult, parse_reward, tail_lines

REWARD_TXT = "/logs/verifier/reward.txt"
REWARD_JSON = "/logs/verifier/reward.json"


def run_verifier(session, put_tests: Callable[[], None]) -> VerifyResult:
    task, config = session.task, session.config
    try:
        put_tests()
    except SandboxError as e:
        return VerifyResult(0.0, -1, 0.0, "", error=str(e))
    env = dict(task.verifier_env)
    if task.layout == "terminal-bench":
        script = "/tests/run-tests.sh"
        env.setdefault("TEST_DIR", "/tests")
    else:
        script = "/tests/test.sh"
    res = session.run(f"bash {script}", timeout=task.verifier_timeout_s, env=env)
    tail = tail_lines(res.output, config.verifier_tail_lines)
    if res.timed_out:
        return VerifyResult(
            0.0, res.exit_code, res.duration_s, tail,
            error=f"the verifier timed out after {task.verifier_timeout_s:g}s", timed_out=True,
        )
    txt, js = session.read_file(REWARD_TXT), session.read_file(REWARD_JSON)
    if task.layout == "terminal-bench" and txt is None and js is None:
        return VerifyResult(1.0 if res.exit_code == 0 else 0.0, res.exit_code, res.duration_s, tail)
    reward, error = parse_reward(txt, js)
    return VerifyResult(reward, res.exit_code, res.duration_s, tail, error=error)
