"""Read and write mini-swe-agent trajectory files (`*.traj.json`, format "mini-swe-agent-1.1").

Layout (as mini-swe-agent's `DefaultAgent.serialize` writes it): `info` (model_stats,
config, mini_version, exit_status, submission), `messages` (system, task, then per step an
assistant message with `extra.actions` and an observation: a `user` message in text mode or a
`tool` message answering each tool call id; a format error is a `user` message with
`extra.interrupt_type = "FormatError"`; the last message has role "exit"), `trajectory_format`.

Everything of ours that the format has no slot for rides along in `extra.mirl` (per step) and
`info.mirl` (per episode), so ours -> traj.json -> ours is lossless, while files written by
mini-swe-agent itself import with the fields they do have.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mirl.agent.messages import assistant_text, observation_text, tool_calls
from mirl.agent.parse import parse_reply
from mirl.agent.prompts import instance_prompt, system_prompt
from mirl.agent.trajectory import Step, Trajectory

FORMAT = "mini-swe-agent-1.1"
EXIT_STATUS = {"submitted": "Submitted", "step_limit": "LimitsExceeded", "token_limit": "ContextWindowExceeded",
               "agent_timeout": "TimeExceeded", "error": "Error", "discarded": "Discarded"}
EXIT_REASON = {v: k for k, v in EXIT_STATUS.items()} | {"LimitsExceeded": "step_limit",
                                                         "RepeatedFormatError": "error"}
_STEP_OUTPUT_FIELDS = ("output", "exit_code", "duration_s", "timed_out")


class TrajFormatError(ValueError):
    """A file that is not a mini-swe-agent trajectory we can read; the message says what is off."""


def to_traj_json(traj: Trajectory) -> dict[str, Any]:
    """Our trajectory as a mini-swe-agent 1.1 document."""
    fmt = traj.meta.get("action_format", "text")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt(fmt)},
        {"role": "user", "content": instance_prompt(traj.instruction)},
    ]
    for i, step in enumerate(traj.steps):
        mirl_step = {k: v for k, v in asdict(step).items() if k not in _STEP_OUTPUT_FIELDS}
        calls = tool_calls(step, i) if fmt == "tool" else []
        actions = [] if step.command is None else [
            {"command": step.command, **({"tool_call_id": calls[0].get("id")} if calls else {})}]
        content = assistant_text(step) if fmt != "tool" else (step.raw or step.reasoning)
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            msg["tool_calls"] = calls
        msg["extra"] = {"actions": actions, "mirl": mirl_step}
        messages.append(msg)
        obs_extra = {"raw_output": step.output, "returncode": step.exit_code, "exception_info": "",
                     "duration_s": step.duration_s, "timed_out": step.timed_out}
        obs = observation_text(step, fmt)
        if step.command is None:
            obs_extra = {"interrupt_type": "FormatError", "n_actions": len(calls), "model_response": step.raw,
                         **obs_extra}
        if calls:
            messages += [{"role": "tool", "tool_call_id": c.get("id"), "content": obs, "extra": obs_extra}
                         for c in calls]
        else:
            messages.append({"role": "user", "content": obs, "extra": obs_extra})
    submission = ""
    if traj.exit_reason == "submitted" and traj.steps:
        submission = traj.steps[-1].output.lstrip().partition("\n")[2]
    status = EXIT_STATUS.get(traj.exit_reason, traj.exit_reason)
    messages.append({"role": "exit", "content": submission if traj.exit_reason == "submitted" else status,
                     "extra": {"exit_status": status, "submission": submission}})
    episode = {k: v for k, v in traj.to_dict().items() if k != "steps"}
    usage = traj.meta.get("usage", {})
    return {
        "info": {
            "model_stats": {"instance_cost": usage.get("cost_usd", 0.0),
                            "api_calls": usage.get("calls", sum(s.source == "policy" for s in traj.steps))},
            "config": {"agent": {"action_format": fmt}, "agent_type": "mirl.agent.episode.run_episode",
                       "model": {"model_name": traj.models.get("policy", "")}},
            "mini_version": "",
            "exit_status": status,
            "submission": submission,
            "mirl": episode,
        },
        "messages": messages,
        "trajectory_format": FORMAT,
        "instance_id": traj.task,
    }


_RETURNCODE = re.compile(r"<returncode>(-?\d+|None)</returncode>")
_OUTPUT = re.compile(r"<output>\n?(.*?)</output>", re.DOTALL)


def _observation_fields(msg: dict[str, Any]) -> dict[str, Any]:
    extra = msg.get("extra") or {}
    content = msg.get("content") or ""
    if isinstance(content, list):  # multimodal content blocks
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    if "raw_output" in extra:
        out = {"output": extra.get("raw_output") or "", "exit_code": extra.get("returncode")}
    else:
        m, o = _RETURNCODE.search(content), _OUTPUT.search(content)
        code = int(m.group(1)) if m and m.group(1) != "None" else None
        out = {"output": o.group(1) if o else content, "exit_code": code}
    if isinstance(out["exit_code"], str):
        out["exit_code"] = int(out["exit_code"]) if out["exit_code"].lstrip("-").isdigit() else None
    for k in ("duration_s", "timed_out"):
        if k in extra:
            out[k] = extra[k]
    return out


def from_traj_json(data: dict[str, Any], task: str | None = None, seed: int = 0) -> Trajectory:
    """A mini-swe-agent document (ours or mini-swe-agent's own) as our trajectory."""
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise TrajFormatError("not a mini-swe-agent trajectory: expected an object with a `messages` list")
    fmt_name = data.get("trajectory_format", "")
    if fmt_name and not str(fmt_name).startswith("mini-swe-agent"):
        raise TrajFormatError(f"unsupported trajectory_format {fmt_name!r}; expected {FORMAT}")
    info = data.get("info") or {}
    ours = info.get("mirl")
    messages = data["messages"]
    action_format = "tool" if any(m.get("role") == "tool" or m.get("tool_calls") for m in messages) else "text"
    steps: list[Step] = []
    pending: Step | None = None
    observed = False
    i = 0
    # skip system and the task message
    while i < len(messages) and messages[i].get("role") == "system":
        i += 1
    instruction = ""
    if i < len(messages) and messages[i].get("role") == "user":
        instruction = messages[i].get("content") or ""
        i += 1
    for msg in messages[i:]:
        role, extra = msg.get("role"), msg.get("extra") or {}
        if role == "assistant":
            if pending is not None:
                steps.append(pending)
            pending, observed = _assistant_step(msg, action_format), False
        elif role in ("user", "tool"):
            if role == "user" and (pending is None or observed) and extra.get("interrupt_type") == "FormatError":
                # mini-swe-agent 2.x drops the malformed reply from the history and keeps it here
                if pending is not None:
                    steps.append(pending)
                raw = extra.get("model_response") or ""
                pending, observed = Step(reasoning=parse_reply(action_format, raw).reasoning, command=None, raw=raw), False
            if pending is None or observed:
                continue  # a human-issued command, a note, or the next answer to a rejected multi-call
            obs = _observation_fields(msg)
            if pending.command is None and "raw_output" not in extra:
                obs = {"output": msg.get("content") or "", "exit_code": None}
            for k, v in obs.items():
                setattr(pending, k, v)
            observed = True
        elif role == "exit":
            break
    if pending is not None:
        steps.append(pending)
    if ours:
        traj = Trajectory.from_dict({**ours, "steps": []})
        traj.steps = steps
        return traj
    status = info.get("exit_status", "")
    model_name = ((info.get("config") or {}).get("model") or {}).get("model_name", "")
    return Trajectory(task=task or str(data.get("instance_id", "")), seed=seed,
                      models={"policy": model_name} if model_name else {}, instruction=instruction, steps=steps,
                      exit_reason=EXIT_REASON.get(status, status), meta={"action_format": action_format,
                                                                         "imported_from": fmt_name or FORMAT})


def _assistant_step(msg: dict[str, Any], action_format: str) -> Step:
    extra = msg.get("extra") or {}
    if "mirl" in extra:
        return Step.from_dict(extra["mirl"])
    content = msg.get("content") or ""
    calls = msg.get("tool_calls") or []
    parsed = parse_reply(action_format, content, calls)
    actions = extra.get("actions")
    command = parsed.command
    if actions is not None:
        command = actions[0].get("command") if len(actions) == 1 else None
    step = Step(reasoning=parsed.reasoning, command=command, raw=content)
    if calls:
        step.meta["tool_calls"] = calls
    return step


def save_traj_json(traj: Trajectory, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_traj_json(traj), indent=2))
    return path


def load_traj_json(path: str | Path, seed: int = 0) -> Trajectory:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TrajFormatError(f"{path}: cannot read a JSON trajectory: {e}") from None
    try:
        return from_traj_json(data, task=path.name.removesuffix(".traj.json"), seed=seed)
    except TrajFormatError as e:
        raise TrajFormatError(f"{path}: {e}") from None
