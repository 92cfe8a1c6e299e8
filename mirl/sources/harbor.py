"""Harbor job and trial directories: `jobs/<job>/<trial>/` with `result.json` and the agent's log.

A trial directory holds `result.json` (`task_name`, `trial_name`, `trial_uri`, `agent_info{name,
version, model_info{name, provider}}`, `agent_result{n_input_tokens, n_output_tokens, cost_usd}`,
`verifier_result{rewards{key: number}}`, `exception_info`) and `agent/` with the trajectory:
`trajectory.json` (ATIF, any agent) or the agent's own file (`mini-swe-agent.trajectory.json`).
The job directory above it has its own `result.json` without `task_name`; it is searched through,
not read. When attempts are nested (`attempts/NNN/`), `trial_uri` names the final one. The reward
is the mean of `verifier_result.rewards` (Harbor averages a multi-key reward per key), else
`verifier/reward.json` or `verifier/reward.txt`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from mirl.records.trajectory import Trajectory
from mirl.sources.base import TrajectoryFileError
from mirl.sources.files import read_document

NAME = "Harbor trial directory"
AGENT_FILES = ("trajectory.json", "*.trajectory.json", "*.traj.json")


def _result(d: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((d / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_trial_dir(d: Path) -> bool:
    if not (d / "result.json").is_file():
        return False
    data = _result(d)
    return data is not None and isinstance(data.get("task_name"), str) and \
        ("trial_uri" in data or "trial_name" in data or (d / "agent").is_dir())


def _trajectory_file(agent_dir: Path) -> Path | None:
    for pattern in AGENT_FILES:
        found = sorted(p for p in agent_dir.glob(pattern) if p.is_file())
        if found:
            return found[0]
    return None


def _attempt_dir(trial: Path, uri: Any) -> Path | None:
    """The directory `trial_uri` names: as given when it exists here, else the same tail under `trial`."""
    if not isinstance(uri, str) or not uri:
        return None
    parsed = urlparse(uri)
    target = Path(unquote(parsed.path if parsed.scheme in ("file", "") else ""))
    if not target.parts:
        return None
    if target.is_dir() and (target / "agent").is_dir():
        return target
    parts = target.parts
    for k in range(min(len(parts), 4), 0, -1):  # the run was moved: match the last components
        candidate = trial.joinpath(*parts[-k:])
        if candidate.is_dir() and candidate != trial:
            return candidate
        if trial.name == parts[-k] and k > 1:
            candidate = trial.joinpath(*parts[-k + 1:])
            if candidate.is_dir():
                return candidate
    return None


def _reward(trial: Path, result: dict[str, Any]) -> float | None:
    rewards = (result.get("verifier_result") or {}).get("rewards")
    if isinstance(rewards, dict):
        values = [v for v in rewards.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if values:
            return sum(values) / len(values)
    for name in ("reward.json", "reward.txt"):
        f = trial / "verifier" / name
        if not f.is_file():
            continue
        text = f.read_text(encoding="utf-8", errors="replace").strip()
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict):
            nums = [v for v in value.values() if isinstance(v, (int, float))]
            return sum(nums) / len(nums) if nums else None
        if isinstance(value, (int, float)):
            return float(value)
    return None


def read_trial(trial: Path) -> Trajectory:
    result = _result(trial)
    if result is None:
        raise TrajectoryFileError(f"{trial}/result.json: not a readable Harbor trial result")
    where = [trial]
    final = _attempt_dir(trial, result.get("trial_uri"))
    if final is not None and final != trial:
        where.insert(0, final)
    attempts = sorted(p for p in (trial / "attempts").glob("*") if p.is_dir()) if (trial / "attempts").is_dir() else []
    where += list(reversed(attempts))
    file = next((f for d in where if (f := _trajectory_file(d / "agent")) is not None), None)
    if file is None:
        raise TrajectoryFileError(f"{trial}: Harbor trial with no agent trajectory "
                                  f"(looked for agent/{', agent/'.join(AGENT_FILES)})")
    try:
        data = json.loads(file.read_text(encoding="utf-8", errors="replace"))
    except ValueError:
        raise TrajectoryFileError(f"{file}: not valid JSON") from None
    traj = read_document(file, data)
    agent = result.get("agent_info") if isinstance(result.get("agent_info"), dict) else {}
    model = agent.get("model_info") if isinstance(agent.get("model_info"), dict) else {}
    traj.task = result["task_name"]
    if model.get("name"):
        name = model["name"]
        provider = model.get("provider")
        traj.models = {"policy": f"{provider}/{name}" if provider and not name.startswith(f"{provider}/") else name}
    traj.reward = _reward(trial, result)
    exc = result.get("exception_info")
    if isinstance(exc, dict) and exc:
        text = f"{exc.get('exception_type', 'error')}: {exc.get('exception_message', '')}".strip()
        if traj.reward is None:
            traj.error = text
        else:  # Harbor verifies after an agent timeout: the reward stands, the episode ended at its limit
            traj.meta["harbor_exception"] = text
            if exc.get("exception_type") == "AgentTimeoutError":
                traj.exit_reason = "agent_timeout"
    usage = result.get("agent_result") if isinstance(result.get("agent_result"), dict) else {}
    traj.meta["harbor"] = {"trial_name": result.get("trial_name"), "trial_uri": result.get("trial_uri"),
                           "agent": {k: agent.get(k) for k in ("name", "version") if agent.get(k)},
                           "usage": {k: usage.get(k) for k in ("n_input_tokens", "n_cache_tokens",
                                                               "n_output_tokens", "cost_usd") if usage.get(k) is not None}}
    traj.meta["source_file"] = str(file)
    return traj
