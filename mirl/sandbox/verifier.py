"""The one verification rule every backend follows: run the task's tests, turn their files into a reward.

A backend provides `put_tests` (empty `/logs/verifier`, copy `tests/` to a fresh `/tests`, after
the agent is done) and a session with `run(command, timeout, env=...)` and `read_file(path)`
(text or bytes, None when absent); everything else is decided here, so the backends cannot drift:

- a verifier that outlives its timeout scores 0, whatever it wrote before hanging;
- `reward.json` is read before `reward.txt` (Harbor's order), for Terminal-Bench 1 tasks too;
- an empty, NaN, infinite or non-numeric reward file scores 0, and `error` says which and why;
- a Terminal-Bench 1 task that writes no reward file scores 1 when its script exits 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from mirl.sandbox.base import SandboxError, VerifyResult, tail_lines

REWARD_TXT = "/logs/verifier/reward.txt"
REWARD_JSON = "/logs/verifier/reward.json"
NO_REWARD = "no reward file written to /logs/verifier (reward.txt or reward.json)"


def parse_reward(reward_txt: str | None, reward_json: str | None) -> tuple[float, str | None]:
    """(reward, error) from the verifier's files (None: absent); reward.json wins over reward.txt."""
    if reward_json is not None:
        return _finite(reward_json, "reward.json", _json_reward, "has no numeric reward")
    if reward_txt is not None:
        return _finite(reward_txt, "reward.txt", lambda text: float(text.split()[0]), "is not a number")
    return 0.0, NO_REWARD


def _json_reward(text: str) -> float:
    data = json.loads(text)
    return float(data["reward"] if isinstance(data, dict) else data)


def _finite(text: str, name: str, parse: Callable[[str], float], problem: str) -> tuple[float, str | None]:
    text = text.strip()
    if not text:
        return 0.0, f"{name} is empty"
    try:
        value = parse(text)
    except (ValueError, KeyError, TypeError, IndexError):
        value = math.nan
    if not math.isfinite(value):
        return 0.0, f"{name} {problem}: {text[:80]!r}"
    return value, None


def _text(data: str | bytes | None) -> str | None:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def run_verifier(session, put_tests: Callable[[], None]) -> VerifyResult:
    task, config = session.task, session.config
    try:
        put_tests()
    except SandboxError as e:
        return VerifyResult(0.0, -1, 0.0, "", error=str(e))
    tb1 = task.layout == "terminal-bench"
    script = "/tests/run-tests.sh" if tb1 else "/tests/test.sh"
    env = {"TEST_DIR": "/tests", **task.verifier_env}
    res = session.run(f"bash {script}", timeout=task.verifier_timeout_s, env=env)
    tail = tail_lines(res.output, config.verifier_tail_lines)
    if res.timed_out:
        return VerifyResult(0.0, res.exit_code, res.duration_s, tail,
                            error=f"the verifier timed out after {task.verifier_timeout_s:g}s", timed_out=True)
    txt, js = _text(session.read_file(REWARD_TXT)), _text(session.read_file(REWARD_JSON))
    if tb1 and txt is None and js is None:
        return VerifyResult(1.0 if res.exit_code == 0 else 0.0, res.exit_code, res.duration_s, tail)
    reward, error = parse_reward(txt, js)
    return VerifyResult(reward, res.exit_code, res.duration_s, tail, error=error)
