"""Terminal-Bench 1 trial directories: `runs/<run>/<task>/<trial>/results.json` and the agent's log.

`results.json` gives `task_id`, `trial_name`, `is_resolved`, token counts. The agent's steps are
readable only where the trial kept a structured log: a trajectory file of a known format under
`agent-logs/` (e.g. mini-swe-agent's `.traj.json`), or Terminus's episodes
(`agent-logs/episode-N/response.json` with `commands[{keystrokes}]` and `is_task_complete`; the
terminal screen the next episode was shown, `episode-N+1/prompt.txt`, is the output). The
`sessions/agent.log` recording of the terminal is not a step log and is not parsed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mirl.records.trajectory import Step, Trajectory
from mirl.sources.base import TrajectoryFileError
from mirl.sources.files import PATTERNS, read_file

NAME = "Terminal-Bench 1 trial directory"


def _results(d: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((d / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_trial_dir(d: Path) -> bool:
    if not (d / "results.json").is_file():
        return False
    data = _results(d)
    return data is not None and "task_id" in data and "trial_name" in data


def _episodes(logs: Path) -> list[Path]:
    found = [p for p in logs.glob("episode-*") if p.is_dir() and re.fullmatch(r"episode-\d+", p.name)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def _terminus_steps(episodes: list[Path]) -> list[Step]:
    steps: list[Step] = []
    for k, ep in enumerate(episodes):
        try:
            reply = json.loads((ep / "response.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        screen = ""
        if k + 1 < len(episodes) and (episodes[k + 1] / "prompt.txt").is_file():
            screen = (episodes[k + 1] / "prompt.txt").read_text(encoding="utf-8", errors="replace")
        reasoning = "\n".join(str(reply.get(key) or "") for key in ("state_analysis", "explanation")).strip()
        commands = [c for c in reply.get("commands") or [] if isinstance(c, dict)]
        group = []
        for c in commands:
            keys = str(c.get("keystrokes") or "")
            group.append(Step(reasoning="", command=keys[:-1] if keys.endswith("\n") else keys))
        if reply.get("is_task_complete"):
            group.append(Step(reasoning="", command="tool:task_complete", meta={"submission": True}))
        if not group:
            group = [Step(reasoning=reasoning, command=None, output=screen)]
        else:
            runs = [s for s in group if not s.meta.get("submission")]
            if runs:
                runs[-1].output = screen
        group[0].reasoning, group[0].raw = reasoning, json.dumps(reply)
        if len(group) > 1:
            group[0].meta["reply_actions"] = len(group)
            for i, s in enumerate(group[1:], 1):
                s.meta["reply_action"] = i
        steps += group
    return steps


def read_trial(trial: Path) -> Trajectory:
    results = _results(trial) or {}
    logs = trial / "agent-logs"
    traj: Trajectory | None = None
    if logs.is_dir():
        files = sorted(f for p in PATTERNS for f in logs.rglob(p) if f.is_file())
        if files:
            traj = read_file(files[0])[0]
        elif episodes := _episodes(logs):
            steps = _terminus_steps(episodes)
            traj = Trajectory(task="", seed=0, models={}, steps=steps,
                              exit_reason="submitted" if any(s.meta.get("submission") for s in steps) else "",
                              meta={"imported_from": "terminus episodes", "source_file": str(logs)})
    if traj is None:
        raise TrajectoryFileError(f"{trial}: Terminal-Bench 1 trial with no readable agent log (looked for "
                                  f"agent-logs/ with a trajectory file or Terminus episodes; "
                                  f"sessions/agent.log is a terminal recording)")
    traj.task = str(results.get("task_id") or traj.task)
    if isinstance(results.get("is_resolved"), bool):
        traj.reward = 1.0 if results["is_resolved"] else 0.0
    if not traj.instruction and isinstance(results.get("instruction"), str):
        traj.instruction = results["instruction"]
    traj.meta["tb1"] = {"trial_name": results.get("trial_name"), "failure_mode": results.get("failure_mode")}
    return traj
