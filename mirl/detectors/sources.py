"""Read trajectory files into `Trajectory` records, whatever agent wrote them.

Accepted: our JSONL (one `Trajectory.to_dict()` per line, or one such object as .json);
mini-swe-agent `.traj.json` (format 1 and 1.1: text actions in ```bash / ```mswea_bash_command
blocks with `<returncode>`/`<output>` observations, or tool calls with `role: tool` results whose
content is JSON); and a bare list of OpenAI-style chat messages. Each agent action becomes one
`Step`, so step indices mean "the i-th action", not message positions. A reply with no runnable
action (a format error) is a step with `command=None`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mirl.agent.trajectory import Step, Trajectory

PATTERNS = ("*.traj.json", "*.jsonl")
ACTION_REGEXES = (
    r"```mswea_bash_command\s*\n(.*?)\n```",
    r"```(?:bash|sh|shell|console)\s*\n(.*?)\n```",
)
_EXIT_REASONS = {
    "submitted": "submitted",
    "limitsexceeded": "step_limit",
    "timeexceeded": "agent_timeout",
    "repeatedformaterror": "error",
    "contextwindowexceedederror": "token_limit",
}


class TrajectoryFileError(ValueError):
    """A file could not be read as trajectories; the message names the file and what is wrong."""


def find_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files named on the command line, with directories searched recursively for trajectory files."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = {f for pattern in PATTERNS for f in p.rglob(pattern) if f.is_file()}
            out.extend(sorted(found))
        else:
            out.append(p)
    return out


def read_trajectories(path: str | Path) -> list[Trajectory]:
    """All trajectories in one file; raises `TrajectoryFileError` with the file name on any problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise TrajectoryFileError(f"{path}: cannot read: {e.strerror or e}") from None
    if not text.strip():
        raise TrajectoryFileError(f"{path}: file is empty")
    if path.name.endswith(".jsonl"):
        return _read_jsonl(path, text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        if "\n" in text.strip():  # perhaps JSONL under another name
            return _read_jsonl(path, text)
        raise TrajectoryFileError(f"{path}: not valid JSON") from None
    try:
        return [_from_json(path, data)]
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        if isinstance(e, TrajectoryFileError):
            raise
        raise TrajectoryFileError(f"{path}: not a trajectory this reader knows ({type(e).__name__}: {e})") from None


def _read_jsonl(path: Path, text: str) -> list[Trajectory]:
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise TrajectoryFileError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict) or "steps" not in obj or not isinstance(obj.get("steps"), list):
            raise TrajectoryFileError(f"{path}:{lineno}: expected a trajectory object with 'task' and 'steps'")
        try:
            traj = Trajectory.from_dict({"task": path.name, "seed": 0, "models": {}, **obj})
        except (TypeError, AttributeError) as e:
            raise TrajectoryFileError(f"{path}:{lineno}: malformed trajectory ({e})") from None
        traj.meta.setdefault("source_file", str(path))
        traj.meta.setdefault("line", lineno)
        out.append(traj)
    if not out:
        raise TrajectoryFileError(f"{path}: no trajectories in file")
    return out


def _from_json(path: Path, data: Any) -> Trajectory:
    if isinstance(data, dict) and isinstance(data.get("steps"), list) and "messages" not in data:
        traj = Trajectory.from_dict({"task": path.name, "seed": 0, "models": {}, **data})
        traj.meta.setdefault("source_file", str(path))
        return traj
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        return from_messages(data["messages"], task=_task_name(path, data), info=data.get("info") or {}, source=str(path),
                             fmt=str(data.get("trajectory_format", "")))
    if isinstance(data, list) and data and all(isinstance(m, dict) and "role" in m for m in data):
        return from_messages(data, task=_task_name(path, {}), info={}, source=str(path), fmt="chat")
    raise TrajectoryFileError(
        f"{path}: not a trajectory: expected our JSONL, a mini-swe-agent .traj.json (with 'messages') or a list of chat messages"
    )


def _task_name(path: Path, data: dict) -> str:
    for key in ("instance_id", "task_id", "task"):
        if isinstance(data.get(key), str):
            return data[key]
    name = path.name
    for suffix in (".traj.json", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


# --- chat messages -> steps


def from_messages(messages: list[dict], *, task: str = "", info: dict | None = None, source: str = "", fmt: str = "") -> Trajectory:
    """Turn a mini-swe-agent / OpenAI chat transcript into a Trajectory with one Step per action."""
    info = info or {}
    steps: list[Step] = []
    pending: list[Step] = []  # steps of the last assistant message still waiting for observations
    instruction = ""
    exit_status = str(info.get("exit_status", ""))
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise TrajectoryFileError(f"{source}: message {i} is not an object")
        role, content, extra = msg.get("role"), _text(msg.get("content")), msg.get("extra") or {}
        if role == "system":
            continue
        if role == "assistant":
            pending = _steps_from_assistant(msg, content)
            steps.extend(pending)
            continue
        if role == "exit":
            exit_status = exit_status or str(extra.get("exit_status", content))
            if pending and not pending[0].output and extra.get("exit_status") == "Submitted":
                pending[0].output, pending[0].exit_code = content, 0
            pending = []
            continue
        if role not in {"user", "tool"}:
            continue
        if not steps and not pending and not instruction and extra.get("interrupt_type") is None and role == "user":
            instruction = content  # the task message
            continue
        if extra.get("interrupt_type") == "FormatError" and not pending:
            # mini-swe-agent 2: the unparseable reply is not kept as an assistant message
            raw, reasoning = _format_error_reply(extra)
            steps.append(Step(reasoning=reasoning, command=None, output=content, raw=raw))
            continue
        target = _match_observation(pending, msg)
        if target is None:
            continue  # a message no action asked for (e.g. a human's note): not agent behavior
        _fill_observation(target, content, extra)
        pending = [s for s in pending if s is not target]
    traj = Trajectory(task=task, seed=0, models=_models(info), instruction=instruction, steps=steps)
    traj.exit_reason = _EXIT_REASONS.get(exit_status.lower(), exit_status.lower()) if exit_status else ""
    traj.meta.update({"source_file": source, "format": fmt or "chat"})
    if info.get("submission"):
        traj.meta["submission"] = info["submission"]
    return traj


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal / content-part lists
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _models(info: dict) -> dict[str, str]:
    model = ((info.get("config") or {}).get("model") or {}) if isinstance(info.get("config"), dict) else {}
    name = model.get("model_name") if isinstance(model, dict) else None
    return {"policy": name} if isinstance(name, str) else {}


def _steps_from_assistant(msg: dict, content: str) -> list[Step]:
    tool_calls = msg.get("tool_calls") or []
    reasoning = content
    thinking = msg.get("reasoning_content") or ""
    if isinstance(thinking, str) and thinking.strip():
        reasoning = (thinking + "\n" + content).strip()
    if tool_calls:
        steps = []
        for n, call in enumerate(tool_calls):
            fn = (call or {}).get("function") or {}
            command = _tool_command(fn)
            step = Step(reasoning=reasoning if n == 0 else "", command=command, raw=content)
            step.meta["tool_call_id"] = call.get("id")
            steps.append(step)
        return steps
    actions = (msg.get("extra") or {}).get("actions")
    if isinstance(actions, list) and actions and all(isinstance(a, dict) for a in actions):
        cmds = [a.get("command", a.get("action")) for a in actions]
        if all(isinstance(c, str) for c in cmds):
            return [Step(reasoning=_strip_actions(content) if n == 0 else "", command=c, raw=content) for n, c in enumerate(cmds)]
    found: list[str] = []
    for regex in ACTION_REGEXES:
        found = [a.strip() for a in re.findall(regex, content, re.DOTALL)]
        if found:
            break
    command = found[0] if len(found) == 1 and found[0] else None  # mini-swe-agent demands exactly one
    return [Step(reasoning=_strip_actions(content), command=command, raw=content)]


def _tool_command(fn: dict) -> str | None:
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if isinstance(args, dict) and isinstance(args.get("command"), str) and args["command"].strip():
        return args["command"]
    return None


def _strip_actions(content: str) -> str:
    text = content
    for regex in ACTION_REGEXES:
        text = re.sub(regex, "", text, flags=re.DOTALL)
    return re.sub(r"^\s*THOUGHT:\s*", "", text.strip())


def _format_error_reply(extra: dict) -> tuple[str, str]:
    raw = extra.get("model_response")
    if not isinstance(raw, str):
        raw = ""
        response = extra.get("response")
        if isinstance(response, dict):
            try:
                raw = _text(response["choices"][0]["message"].get("content"))
            except (KeyError, IndexError, TypeError, AttributeError):
                raw = ""
    return raw, _strip_actions(raw)


def _match_observation(pending: list[Step], msg: dict) -> Step | None:
    if not pending:
        return None
    call_id = msg.get("tool_call_id")
    if call_id:
        for s in pending:
            if s.meta.get("tool_call_id") == call_id:
                return s
    return pending[0]


_RC = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_TAG = r"<{0}>\n?(.*?)\n?</{0}>"


def _fill_observation(step: Step, content: str, extra: dict) -> None:
    """Output and exit code of one action, from mini-swe-agent's `extra` or its rendered templates."""
    if step.command is None:
        step.output = content
        return
    if "raw_output" in extra or "returncode" in extra:
        step.output = _text(extra.get("raw_output", ""))
        rc = extra.get("returncode")
        step.exit_code = rc if isinstance(rc, int) else None
        if extra.get("exception_info") and "timed out" in str(extra["exception_info"]).lower():
            step.timed_out = True
        return
    parsed = _parse_rendered(content)
    if parsed is not None:
        step.output, step.exit_code = parsed
        return
    if re.search(r"timed out and has been killed", content):
        step.timed_out, step.exit_code = True, None
        m = re.search(_TAG.format("output"), content, re.DOTALL)
        step.output = m.group(1) if m else content
        return
    step.output = re.sub(r"^Observation:\s*", "", content)


def _parse_rendered(content: str) -> tuple[str, int | None] | None:
    stripped = content.strip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(stripped)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and ("output" in obj or "output_head" in obj):
            rc = obj.get("returncode")
            out = obj.get("output")
            if out is None:
                out = f"{obj.get('output_head', '')}\n[... {obj.get('elided_chars', '?')} characters elided ...]\n{obj.get('output_tail', '')}"
            return _text(out), rc if isinstance(rc, int) else None
    m = _RC.search(content)
    if not m:
        return None
    rc = int(m.group(1))
    out = re.search(_TAG.format("output"), content, re.DOTALL)
    if out:
        return out.group(1), rc
    head = re.search(_TAG.format("output_head"), content, re.DOTALL)
    tail = re.search(_TAG.format("output_tail"), content, re.DOTALL)
    if head or tail:
        return f"{head.group(1) if head else ''}\n[... output elided ...]\n{tail.group(1) if tail else ''}", rc
    return content[m.end():].strip(), rc
