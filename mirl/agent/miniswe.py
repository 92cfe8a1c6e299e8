"""Read and write mini-swe-agent trajectory files: the one reader behind `mirl detect` and `mirl rollout import`.

Read: format "mini-swe-agent-1.1" (2.x `DefaultAgent.serialize`), "mini-swe-agent-1" (1.x `save_traj`),
a bare list of messages (1.0 files, or any OpenAI-style chat transcript) and our own exports.
Layout (2.x): `info` (model_stats, config, mini_version, exit_status, submission), `messages` (system,
task, then per reply an assistant message with `extra.actions` and one observation per action: a
`user` message in text mode, a `tool` message answering its call id in tool mode; the last message
has role "exit"), `trajectory_format`. 1.x kept no `extra`: observations are rendered templates
(`<returncode>`/`<output>` tags, or JSON in tool mode), parsed back here.

Steps: one per executed action, so step i means "the i-th command run", as in our own runs.
mini-swe-agent executes every entry of a reply's `extra.actions` (2.x: every tool call) and answers
each in its own message, so a reply with n actions becomes n steps: the first carries the reply's
reasoning and raw text and `meta["reply_actions"] = n`, step k of the reply `meta["reply_action"] = k`
(1..n-1) with empty reasoning and raw; in tool mode each keeps its own call in `meta["tool_calls"]`.
Export joins such steps back into the one assistant message they came from. A reply with no runnable
action is one step with `command=None` whose output is the error shown: 1.x keeps the reply as an
assistant message, 2.x drops it and keeps it in the format-error message (`model_response` in text
mode, `response` in tool mode). 2.x writes no observation for the submitting command (the exit
message holds the submission) and 1.x answers it with the submission alone, so its output is
rebuilt as the marker line plus the submission, exit code 0.

Everything of ours that the format has no slot for rides along in `extra.mirl` (per reply: one step's
fields, or a list for a reply of several steps) and `info.mirl` (per episode), so ours -> traj.json ->
ours is lossless. Files written by mini-swe-agent itself keep what the format holds so that export
gives the same document back: the first step of each reply keeps its messages as they were in
`meta["miniswe_messages"]`, and the episode keeps the messages before the first reply and from the
exit message on, plus every other top-level field (info with config and costs, instance_id,
trajectory_format, anything else) in `meta["miniswe"]`. A step without kept messages (one added or
replayed here) is written the way our own runs are.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mirl.agent.messages import assistant_text, observation_text, tool_calls
from mirl.agent.parse import parse_reply, shell_command
from mirl.agent.prompts import SUBMIT_MARKER, instance_prompt, system_prompt
from mirl.records.trajectory import Step, Trajectory

FORMAT = "mini-swe-agent-1.1"
EXIT_STATUS = {"submitted": "Submitted", "step_limit": "LimitsExceeded", "token_limit": "ContextWindowExceeded",
               "agent_timeout": "TimeExceeded", "error": "Error", "discarded": "Discarded"}
EXIT_REASON = {v.lower(): k for k, v in EXIT_STATUS.items()} | {
    "repeatedformaterror": "error", "contextwindowexceedederror": "token_limit"}
_STEP_OUTPUT_FIELDS = ("output", "exit_code", "duration_s", "timed_out")


class TrajFormatError(ValueError):
    """A file that is not a mini-swe-agent trajectory we can read; the message says what is off."""


# --- export -------------------------------------------------------------------------------------


def _reply_group(steps: list[Step], i: int) -> list[Step]:
    """Steps i.. that came from one reply (see the module docstring); just step i for our own runs."""
    group = [steps[i]]
    n = steps[i].meta.get("reply_actions", 1)
    while len(group) < n and i + len(group) < len(steps) and steps[i + len(group)].meta.get("reply_action") == len(group):
        group.append(steps[i + len(group)])
    return group


def _observation(step: Step, fmt: str, call: dict[str, Any] | None, n_calls: int) -> dict[str, Any]:
    extra = {"raw_output": step.output, "returncode": step.exit_code, "exception_info": "",
             "duration_s": step.duration_s, "timed_out": step.timed_out}
    if step.command is None:
        extra = {"interrupt_type": "FormatError", "n_actions": n_calls, "model_response": step.raw, **extra}
    content = observation_text(step, fmt)
    if call is None:
        return {"role": "user", "content": content, "extra": extra}
    return {"role": "tool", "tool_call_id": call.get("id"), "content": content, "extra": extra}


def _reply_messages(group: list[Step], index: int, fmt: str) -> list[dict[str, Any]]:
    """One assistant message and its observations for the steps of one reply."""
    first = group[0]
    mirl = [{k: v for k, v in asdict(s).items() if k not in _STEP_OUTPUT_FIELDS} for s in group]
    content = assistant_text(first) if fmt != "tool" else (first.raw or first.reasoning)
    if len(group) == 1:
        calls = tool_calls(first, index) if fmt == "tool" else []
        actions = [] if first.command is None else [
            {"command": first.command, **({"tool_call_id": calls[0].get("id")} if calls else {})}]
        # a rejected reply of several calls still answers each call id, or chat APIs refuse the history
        answers = [_observation(first, fmt, c, len(calls)) for c in calls] or [_observation(first, fmt, None, 0)]
    else:
        calls = [(tool_calls(s, index + k) or [{"id": f"call_{index + k}", "type": "function",
                                                  "function": {"name": "bash", "arguments": "{}"}}])[0]
                 for k, s in enumerate(group)] if fmt == "tool" else []
        actions = [{"command": s.command, **({"tool_call_id": calls[k].get("id")} if calls else {})}
                   for k, s in enumerate(group)]
        answers = [_observation(s, fmt, calls[k] if calls else None, 1) for k, s in enumerate(group)]
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = calls
    msg["extra"] = {"actions": actions, "mirl": mirl[0] if len(group) == 1 else mirl}
    return [msg, *answers]


def _imported_document(traj: Trajectory, kept: dict[str, Any]) -> dict[str, Any] | list[Any]:
    """A file mini-swe-agent wrote, given back as it was read (steps without kept messages are rebuilt)."""
    fmt = traj.meta.get("action_format", "text")
    messages = copy.deepcopy(kept.get("head", []))
    i = 0
    while i < len(traj.steps):
        group = _reply_group(traj.steps, i)
        own = group[0].meta.get("miniswe_messages")
        messages += copy.deepcopy(own) if isinstance(own, list) else _reply_messages(group, i, fmt)
        i += len(group)
    messages += copy.deepcopy(kept.get("tail", []))
    if kept.get("bare"):
        return messages
    return {**copy.deepcopy(kept.get("document", {})), "messages": messages}


def to_traj_json(traj: Trajectory) -> dict[str, Any] | list[Any]:
    """Our trajectory as a mini-swe-agent 1.1 document, or an imported file as it was."""
    kept = traj.meta.get("miniswe")
    if isinstance(kept, dict):
        return _imported_document(traj, kept)
    fmt = traj.meta.get("action_format", "text")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt(fmt)},
        {"role": "user", "content": instance_prompt(traj.instruction)},
    ]
    i = 0
    while i < len(traj.steps):
        group = _reply_group(traj.steps, i)
        messages += _reply_messages(group, i, fmt)
        i += len(group)
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


# --- import -------------------------------------------------------------------------------------


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # multimodal content blocks
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return content if isinstance(content, str) else str(content)


def _call_command(call: dict[str, Any]) -> str | None:
    """The shell command of one call of a chat transcript: a `bash` call as the harness parses it,
    else any tool whose arguments hold one (`execute_bash`, `shell`: `{"cmd": ...}`)."""
    command = parse_reply("tool", "", [call]).command
    if command is not None:
        return command
    args = (call.get("function") or {}).get("arguments", call.get("arguments"))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    return shell_command(args) if isinstance(args, dict) else None


def _call_id(call: Any) -> str | None:
    return call.get("id") if isinstance(call, dict) else None


def _reply_steps(msg: dict[str, Any], action_format: str) -> list[tuple[Step, set]]:
    """The steps of one assistant message, each with the tool call ids its observation may answer."""
    extra = msg.get("extra") or {}
    content = _text(msg.get("content"))
    calls = [c for c in msg.get("tool_calls") or [] if isinstance(c, dict)]
    actions = extra.get("actions")
    ours = extra.get("mirl")
    if ours is not None:
        steps = [Step.from_dict(d) for d in (ours if isinstance(ours, list) else [ours])]
        if len(steps) == 1:
            return [(steps[0], {_call_id(c) for c in calls})]
        ids = [a.get("tool_call_id") for a in actions or [] if isinstance(a, dict)]
        return [(s, {ids[k]} if k < len(ids) else set()) for k, s in enumerate(steps)]
    thinking = msg.get("reasoning_content")
    parsed = parse_reply(action_format, content, calls)
    reasoning = parsed.reasoning
    if isinstance(thinking, str) and thinking.strip():
        reasoning = (thinking.strip() + "\n" + reasoning).strip()
    if isinstance(actions, list) and actions and all(isinstance(a, dict) for a in actions):
        commands = [a.get("command", a.get("action")) for a in actions]
        ids = [a.get("tool_call_id") for a in actions]
    elif calls:  # a chat transcript without mini-swe-agent's parse: each call is an action
        commands = [_call_command(c) for c in calls]
        ids = [_call_id(c) for c in calls]
    else:  # 1.x text mode: exactly one block or a format error
        return [(Step(reasoning=reasoning, command=parsed.command, raw=content), set())]
    by_id = {_call_id(c): c for c in calls}
    out = []
    for k, (command, cid) in enumerate(zip(commands, ids)):
        step = Step(reasoning=reasoning if k == 0 else "", command=command if isinstance(command, str) else None,
                    raw=content if k == 0 else "")
        call = by_id.get(cid) or (calls[k] if k < len(calls) else None)
        if call is not None:
            step.meta["tool_calls"] = [call]
        if len(commands) > 1:
            step.meta["reply_action" if k else "reply_actions"] = k if k else len(commands)
        out.append((step, {cid} if cid else set()))
    return out


def _format_error_step(extra: dict[str, Any], content: str, action_format: str) -> Step:
    """2.x drops a malformed reply from the history; the format-error message keeps it."""
    raw, calls = extra.get("model_response"), []
    if not isinstance(raw, str):
        raw = ""
        try:
            message = extra["response"]["choices"][0]["message"]
            raw = _text(message.get("content"))
            calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
        except (KeyError, IndexError, TypeError, AttributeError):
            pass
    step = Step(reasoning=parse_reply(action_format, raw).reasoning, command=None, output=content, raw=raw)
    if calls:
        step.meta["tool_calls"] = calls
    return step


_RC = re.compile(r"<returncode>\s*(-?\d+|None)\s*</returncode>")
_TAG = r"<{0}>\n?(.*?)\n?</{0}>"


def _parse_rendered(content: str) -> tuple[str, int | None] | None:
    """Output and exit code from an observation template as mini-swe-agent renders it (no `extra`)."""
    stripped = content.strip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(stripped)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and ("output" in obj or "output_head" in obj):
            rc = obj.get("returncode")
            out = obj.get("output")
            if out is None:
                out = f"{obj.get('output_head', '')}\n[... {obj.get('elided_chars', '?')} characters elided ...]\n" \
                      f"{obj.get('output_tail', '')}"
            return _text(out), rc if isinstance(rc, int) else None
    m = _RC.search(content)
    if not m:
        return None
    rc = int(m.group(1)) if m.group(1) != "None" else None
    out = re.search(r"<output>\n?(.*?)</output>", content, re.DOTALL)
    if out:
        return out.group(1), rc
    head = re.search(_TAG.format("output_head"), content, re.DOTALL)
    tail = re.search(_TAG.format("output_tail"), content, re.DOTALL)
    if head or tail:
        return f"{head.group(1) if head else ''}\n[... output elided ...]\n{tail.group(1) if tail else ''}", rc
    return content[m.end():].strip(), rc


def _fill_observation(step: Step, content: str, extra: dict[str, Any]) -> None:
    """Output and exit code of one action, from the message's `extra` or its rendered template."""
    if "raw_output" in extra or "returncode" in extra:
        step.output = _text(extra.get("raw_output"))
        rc = extra.get("returncode")
        if isinstance(rc, str) and rc.lstrip("-").isdigit():
            rc = int(rc)
        step.exit_code = rc if isinstance(rc, int) else None
        info = str(extra.get("exception_info") or "")
        step.timed_out = bool(extra.get("timed_out")) or extra.get("exception_type") == "TimeoutExpired" \
            or "timed out" in info.lower()
        if isinstance(extra.get("duration_s"), (int, float)):
            step.duration_s = extra["duration_s"]
        return
    if step.command is None:
        step.output = content
        return
    parsed = _parse_rendered(content)
    if parsed is not None:
        step.output, step.exit_code = parsed
    elif "timed out and has been killed" in content:  # 1.x timeout template
        step.timed_out, step.exit_code = True, None
        m = re.search(_TAG.format("output"), content, re.DOTALL)
        step.output = m.group(1) if m else content
    elif SUBMIT_MARKER in step.command:  # 1.x answers the submitting command with the submission alone
        step.output, step.exit_code = f"{SUBMIT_MARKER}\n{content}", 0
    else:
        step.output = content


def from_messages(messages: list[Any], action_format: str | None = None
                  ) -> tuple[str, list[Step], dict[str, Any], dict[str, list[Any]]]:
    """(instruction, steps, exit message's extra, messages kept outside replies) of a message list.

    The first step of each reply gets the messages of that reply (the assistant message or format
    error and the observations that follow) in `meta["miniswe_messages"]`; the rest is returned as
    `{"head": [...], "tail": [...]}`.
    """
    if action_format is None:
        action_format = "tool" if any(isinstance(m, dict) and (m.get("role") == "tool" or m.get("tool_calls"))
                                      for m in messages) else "text"
    steps: list[Step] = []
    pending: list[tuple[Step, set]] = []  # steps of the last reply still waiting for their observation
    instruction: str | None = None
    exit_extra: dict[str, Any] = {}
    head: list[Any] = []  # messages before the first reply
    tail: list[Any] = []  # the exit message and whatever follows it
    current: list[Any] = head  # where the message being read is kept

    def starts_reply(first: Step, msg: dict[str, Any]) -> None:
        nonlocal current
        current = first.meta["miniswe_messages"] = [msg]

    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise TrajFormatError(f"message {i} is not an object")
        role, extra, content = msg.get("role"), msg.get("extra") or {}, _text(msg.get("content"))
        if not isinstance(extra, dict):
            raise TrajFormatError(f"message {i}: `extra` is not an object")
        if role == "assistant":
            pending = _reply_steps(msg, action_format)
            steps += [s for s, _ in pending]
            starts_reply(pending[0][0], msg)
            continue
        if role == "exit":
            exit_extra = {"exit_status": content, **extra}
            runs = [s for s, _ in pending if s.command is not None]
            if exit_extra.get("exit_status") == "Submitted" and runs:  # 2.x: the submitting command has no observation
                step = next((s for s in runs if SUBMIT_MARKER in s.command), runs[0])
                step.output, step.exit_code = f"{SUBMIT_MARKER}\n{_text(extra.get('submission'))}", 0
            tail.extend(messages[i:])
            break
        if role in ("user", "tool"):
            if instruction is None and not steps and role == "user" and "interrupt_type" not in extra:
                instruction = content  # the task message
            elif role == "user" and not pending and extra.get("interrupt_type") == "FormatError":
                steps.append(_format_error_step(extra, content, action_format))
                starts_reply(steps[-1], msg)
                continue
            elif pending:  # else a message no action asked for (a human's command or note): not the agent's behavior
                call_id = msg.get("tool_call_id")
                k = next((k for k, (_, ids) in enumerate(pending) if call_id and call_id in ids), 0)
                _fill_observation(pending.pop(k)[0], content, extra)
        current.append(msg)
    return instruction or "", steps, exit_extra, {"head": head, "tail": tail}


def from_traj_json(data: Any, task: str | None = None, seed: int = 0) -> Trajectory:
    """A mini-swe-agent document (ours, 2.x, 1.x) or a bare message list as our trajectory."""
    bare = isinstance(data, list)
    if bare and data and all(isinstance(m, dict) and "role" in m for m in data):
        data = {"messages": data}
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise TrajFormatError("not a mini-swe-agent trajectory: expected an object with a `messages` list "
                              "or a list of chat messages")
    fmt_name = str(data.get("trajectory_format") or "")
    if fmt_name and not fmt_name.startswith("mini-swe-agent"):
        raise TrajFormatError(f"unsupported trajectory_format {fmt_name!r}; expected {FORMAT}")
    info = data.get("info") or {}
    if not isinstance(info, dict):
        raise TrajFormatError("`info` is not an object")
    ours = info.get("mirl")
    action_format = ours.get("meta", {}).get("action_format") if isinstance(ours, dict) else None
    instruction, steps, exit_extra, kept = from_messages(data["messages"], action_format)
    if isinstance(ours, dict):  # our own export: everything is in info.mirl and extra.mirl
        for s in steps:
            s.meta.pop("miniswe_messages", None)
        traj = Trajectory.from_dict({**ours, "steps": []})
        traj.steps = steps
        return traj
    status = str(info.get("exit_status") or exit_extra.get("exit_status") or "")
    config = info.get("config") if isinstance(info.get("config"), dict) else {}
    model_name = (config.get("model") or {}).get("model_name") if isinstance(config.get("model"), dict) else None
    meta: dict[str, Any] = {"action_format": "tool" if any(s.meta.get("tool_calls") for s in steps) or any(
        isinstance(m, dict) and m.get("role") == "tool" for m in data["messages"]) else "text",
        "imported_from": fmt_name or "chat messages"}
    if status:
        meta["exit_status"] = status
    submission = info.get("submission") or exit_extra.get("submission")
    if submission:
        meta["submission"] = submission
    instance = data.get("instance_id")
    if isinstance(instance, str) and instance:
        meta["instance_id"] = instance
    stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
    if isinstance(stats.get("instance_cost"), (int, float)) or isinstance(stats.get("api_calls"), int):
        meta["usage"] = {"cost_usd": stats.get("instance_cost", 0.0), "calls": stats.get("api_calls", 0)}
    meta["miniswe"] = {"document": {k: v for k, v in data.items() if k != "messages"}, **kept, "bare": bare}
    return Trajectory(task=instance if isinstance(instance, str) and instance else task or "", seed=seed,
                      models={"policy": model_name} if isinstance(model_name, str) and model_name else {},
                      instruction=instruction, steps=steps,
                      exit_reason=EXIT_REASON.get(status.lower(), "error") if status else "", meta=meta)


def save_traj_json(traj: Trajectory, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_traj_json(traj), indent=2))
    return path


def load_traj_json(path: str | Path, seed: int = 0) -> Trajectory:
    """One trajectory file; a `TrajFormatError` names the file and what is wrong with it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError) as e:
        raise TrajFormatError(f"{path}: cannot read a JSON trajectory: {e}") from None
    try:
        return from_traj_json(data, task=path.name.removesuffix(".traj.json").removesuffix(".json"), seed=seed)
    except TrajFormatError as e:
        raise TrajFormatError(f"{path}: {e}") from None
