"""ATIF, Harbor's Agent Trajectory Interchange Format (v1.0-v1.8): read any agent's file, write ours.

Layout: root `schema_version` ("ATIF-v1.7"), `session_id`, `agent{name, version, model_name}`,
`steps[]`, `final_metrics`, `extra`. A step has `step_id` (from 1), `source` (system | user | agent),
`message`, `reasoning_content`, `tool_calls[{tool_call_id, function_name, arguments}]`,
`observation{results[{source_call_id, content}]}`, `metrics{prompt_tokens, completion_tokens,
prompt_token_ids, completion_token_ids, logprobs, ...}` and `extra`.

Reading: every tool call whose arguments carry a shell command (`command`, `cmd`, `keystrokes`,
`script`, ...) becomes one of our steps, whatever the tool is called; other tools become steps whose
command is `tool:<name> <arguments>` (an unknown program to the detectors: it may read or change
anything), and so do file-editor calls, whose `command` is the editor's subcommand (`view`, `create`,
`str_replace`, ... with a `path`), not a shell command. `mark_task_complete`-style tools are
submissions (`meta["submission"]`). A result answers the call it names; results naming no call (a
terminal screen after a batch of keystrokes) go to the last command of the step. An agent step with
no tool call is a reply with no runnable command (a parse error: its observation is what the agent
was told), except the final message of a run, mini-swe-agent text-mode replies converted by Harbor,
whose command is the ```bash block of the message, replies holding OpenHands' text form of tool
calls (`<function=execute_bash><parameter=command>...`), read as those calls, and Terminus-2
replies kept raw (its `raw_content` option: the reply's JSON or XML as the model wrote it, no tool
calls), whose `keystrokes` and `task_complete` are read as the tool calls Terminus-2 writes
otherwise. Exit codes are known only where the output is mini-swe-agent's rendered template. A file whose root names a
`continued_trajectory_ref` (Terminus-2's `linear_history`: `trajectory.cont-1.json`, ...) is one
episode with the files it names (`read_continuations`, called where the file's path is known).

Writing: one agent step per reply, the command as a `bash` call, its output as the result, token
counts, token ids and logprobs in `metrics`; our fields the format has no slot for ride in
`extra.mirl`, so our file -> ATIF -> ours gives the same steps.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import mirl
from mirl.agent.miniswe import _parse_rendered
from mirl.agent.parse import parse_reply, shell_command
from mirl.agent.prompts import SUBMIT_MARKER
from mirl.records.trajectory import Step, Trajectory
from mirl.sources.base import TrajectoryFileError

NAME = "ATIF"
SCHEMA = "ATIF-v1.7"
SUBMIT_TOOLS = frozenset({"mark_task_complete", "task_complete", "submit", "finish", "complete_task",
                          "attempt_completion", "submit_solution", "final_answer"})
TOKEN_FIELDS = ("prompt_token_ids", "completion_token_ids", "logprobs")
# what Terminus-2 answers a reply it could not parse with (the reply ran nothing)
TERMINUS_PARSE_ERROR = "Previous response had parsing errors"
_XML_KEYSTROKES = re.compile(r"<keystrokes[^>]*>(.*?)</keystrokes>", re.DOTALL)
# OpenHands without native function calling writes its calls in the reply's text
_TEXT_FUNCTION = re.compile(r"<function=([\w.-]+)>(.*?)</function>", re.DOTALL)
_TEXT_PARAMETER = re.compile(r"<parameter=([\w.-]+)>(.*?)</parameter>", re.DOTALL)
# OpenHands ends a command's observation with its metadata: "[The command completed with exit code N.]",
# "[Current working directory: ...]", "[Python interpreter: ...]", "[Command finished with exit code N]"
_OPENHANDS_TRAILER = re.compile(r"(?:\n?\[(?:The command completed with exit code -?\d+\.|Current working directory: [^\]\n]*|"
                                r"Python interpreter: [^\]\n]*|Command finished with exit code (-?\d+))\])+\s*$")
_OPENHANDS_COMPLETED = re.compile(r"\[The command completed with exit code (-?\d+)\.\]")


def sniff(data: Any) -> bool:
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        return False
    version = data.get("schema_version")
    if isinstance(version, str) and version.upper().startswith("ATIF"):
        return True
    first = next((s for s in data["steps"] if isinstance(s, dict)), {})
    return "step_id" in first and "source" in first


# --- reading ------------------------------------------------------------------------------------


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # multimodal content parts (v1.6+)
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else str(content)


def _arguments(call: dict[str, Any]) -> dict[str, Any]:
    args = call.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return {"command": args}
    return args if isinstance(args, dict) else {}


# ATIF metric -> our Step field; prompt ids have no Step field (the trajectory keeps the first prompt's)
STEP_TOKEN_FIELDS = {"completion_token_ids": "completion_ids", "logprobs": "logprobs"}


def _set_tokens(step: Step, metrics: dict[str, Any]) -> None:
    step.input_tokens = metrics.get("prompt_tokens") or 0
    step.output_tokens = metrics.get("completion_tokens") or 0
    for name in TOKEN_FIELDS:
        if metrics.get(name) is not None:
            if name in STEP_TOKEN_FIELDS:
                setattr(step, STEP_TOKEN_FIELDS[name], metrics[name])
            else:
                step.meta[name] = metrics[name]
    if step.completion_ids is not None:
        step.tokens = "sampled" if step.logprobs is not None else "context"


def _openhands(content: str) -> tuple[str, int | None] | None:
    """Output and exit code of an OpenHands command observation (its metadata trailer), or None."""
    m = _OPENHANDS_TRAILER.search(content)
    if not m or "exit code" not in m.group(0):
        return None
    code = m.group(1) or (_OPENHANDS_COMPLETED.search(m.group(0)) or m).group(1)
    return content[:m.start()], int(code) if code is not None else None


def _output(step: Step, content: str) -> None:
    parsed = (_parse_rendered(content) or _openhands(content)) if content else None
    if parsed is not None:
        step.output, step.exit_code = parsed
    else:
        step.output = content
        if step.command and SUBMIT_MARKER in step.command:  # mini-swe-agent 1.x answers with the submission alone
            step.output, step.exit_code = f"{SUBMIT_MARKER}\n{content}", 0


def _terminus_reply(message: str, parser: str) -> tuple[list[str], bool, str] | None:
    """Keystrokes, task_complete and "Analysis: ...\nPlan: ..." of a raw Terminus-2 reply (its JSON or
    XML response format), or None when the reply is not one."""
    if parser != "xml" and "{" in message:
        try:
            obj = json.loads(message[message.index("{"): message.rindex("}") + 1])
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("commands", []), list) and \
                ("commands" in obj or "task_complete" in obj):
            keys = [c["keystrokes"] for c in obj.get("commands") or []
                    if isinstance(c, dict) and isinstance(c.get("keystrokes"), str)]
            done = obj.get("task_complete")
            done = done.strip().lower() in ("true", "1", "yes") if isinstance(done, str) else bool(done)
            parts = [f"{k.title()}: {obj[k]}" for k in ("analysis", "plan") if isinstance(obj.get(k), str) and obj[k]]
            return keys, done, "\n".join(parts)
    if parser != "json" and "<response>" in message:
        body = message.split("<response>", 1)[1].split("</response>", 1)[0]
        commands = re.search(r"<commands>(.*?)</commands>", body, re.DOTALL)
        keys = _XML_KEYSTROKES.findall(commands.group(1)) if commands else []
        done = re.search(r"<task_complete>\s*true\s*</task_complete>", body, re.I) is not None
        parts = []
        for k in ("analysis", "plan"):
            m = re.search(rf"<{k}>(.*?)</{k}>", body, re.DOTALL)
            if m and m.group(1).strip():
                parts.append(f"{k.title()}: {m.group(1).strip()}")
        return keys, done, "\n".join(parts)
    return None


def _terminus_raw_step(raw: dict[str, Any], parser: str) -> dict[str, Any] | None:
    """A Terminus-2 step kept raw, rewritten with the tool calls Terminus-2 writes when not raw."""
    message = _text(raw.get("message"))
    results = (raw.get("observation") or {}).get("results") or []
    if any(isinstance(r, dict) and _text(r.get("content")).startswith(TERMINUS_PARSE_ERROR) for r in results):
        return None  # the reply was refused: no command ran
    parsed = _terminus_reply(message, parser)
    if parsed is None:
        return None
    keys, done, reasoning = parsed
    sid = raw.get("step_id")
    calls = [{"tool_call_id": f"call_{sid}_{k + 1}", "function_name": "bash_command", "arguments": {"keystrokes": ks}}
             for k, ks in enumerate(keys)]
    if done:
        calls.append({"tool_call_id": f"call_{sid}_task_complete", "function_name": "mark_task_complete",
                      "arguments": {}})
    return {**raw, "message": reasoning, "tool_calls": calls}


def _text_function_step(raw: dict[str, Any]) -> dict[str, Any] | None:
    """A step whose reply holds `<function=NAME><parameter=KEY>VALUE</parameter></function>` blocks (the
    text form of tool calls OpenHands uses when the model has no native function calling), rewritten
    with those calls as tool calls; None when it holds none."""
    message = _text(raw.get("message"))
    blocks = _TEXT_FUNCTION.findall(message)
    if not blocks:
        return None
    sid = raw.get("step_id")
    calls = []
    for k, (name, body) in enumerate(blocks):
        args = {key: value.removeprefix("\n").removesuffix("\n") for key, value in _TEXT_PARAMETER.findall(body)}
        calls.append({"tool_call_id": f"call_{sid}_{k + 1}", "function_name": name, "arguments": args})
    return {**raw, "message": _TEXT_FUNCTION.sub("", message).strip(), "tool_calls": calls}


def _agent_steps(raw: dict[str, Any], mini_text: bool, last: bool) -> list[Step]:
    """Our steps for one ATIF agent step (possibly none: the closing message of a run)."""
    message = _text(raw.get("message"))
    reasoning = raw.get("reasoning_content") if isinstance(raw.get("reasoning_content"), str) else ""
    calls = [c for c in raw.get("tool_calls") or [] if isinstance(c, dict)]
    results = [r for r in ((raw.get("observation") or {}).get("results") or []) if isinstance(r, dict)]
    by_id = {r.get("source_call_id"): _text(r.get("content")) for r in results if r.get("source_call_id")}
    loose = "\n".join(_text(r.get("content")) for r in results if not r.get("source_call_id"))
    steps: list[Step] = []
    if not calls:
        parsed = parse_reply("text", message) if mini_text else None
        if parsed is not None and parsed.command is not None:
            step = Step(reasoning=parsed.reasoning, command=parsed.command, raw=message)
            _output(step, loose)
            return [step]
        if last and not results:
            return []  # the agent's closing words, not an action
        return [Step(reasoning=reasoning or message, command=None, output=loose, raw=message)]
    for call in calls:
        name = str(call.get("function_name") or call.get("name") or "")
        args = _arguments(call)
        command = shell_command(args)
        meta: dict[str, Any] = {"tool": name, "tool_call_id": call.get("tool_call_id")}
        if name in SUBMIT_TOOLS:
            meta["submission"] = True
            command = f"tool:{name}"
        elif command is None:
            command = f"tool:{name} {json.dumps(args, sort_keys=True)}"
        elif not command.strip() and "keystrokes" in args:
            meta["wait"] = True  # empty keystrokes: wait for the terminal, runs nothing
        steps.append(Step(reasoning="", command=command, meta=meta))
    for step in steps:
        content = by_id.get(step.meta["tool_call_id"])
        if content is not None:
            _output(step, content)
    if loose:
        target = next((s for s in reversed(steps) if not s.meta.get("submission")), steps[-1])
        _output(target, (target.output + "\n" + loose) if target.output else loose)
    steps[0].reasoning, steps[0].raw = (reasoning or message), message
    if len(steps) > 1:
        steps[0].meta["reply_actions"] = len(steps)
        for k, s in enumerate(steps[1:], 1):
            s.meta["reply_action"] = k
    return steps


def _ours(data: dict[str, Any], episode: dict[str, Any]) -> Trajectory:
    """A file written by `to_atif`: our fields come back from `extra.mirl`."""
    steps: list[Step] = []
    for raw in data["steps"]:
        kept = (raw.get("extra") or {}).get("mirl")
        if raw.get("source") != "agent" or kept is None:
            continue
        results = (raw.get("observation") or {}).get("results") or []
        by_id = {r.get("source_call_id"): _text(r.get("content")) for r in results}
        calls = iter(raw.get("tool_calls") or [])
        group = [Step.from_dict(d) for d in (kept if isinstance(kept, list) else [kept])]
        for s in group:
            cid = next(calls, {}).get("tool_call_id") if s.command is not None else None
            s.output = by_id.get(cid, "")
        _set_tokens(group[0], raw.get("metrics") or {})
        steps += group
    traj = Trajectory.from_dict({**episode, "steps": []})
    traj.steps = steps
    return traj


def check_version(version: Any) -> None:
    """ATIF v1.x is read (minor versions add optional fields); another major version is refused rather
    than read by the wrong rules."""
    if version is None:
        return
    m = re.fullmatch(r"ATIF-v(\d+)(?:\.(\d+))?", str(version).strip(), re.I)
    if m is None:
        raise TrajectoryFileError(f"schema_version {version!r} is not an ATIF version (ATIF-v<major>.<minor>)")
    if int(m.group(1)) != 1:
        raise TrajectoryFileError(f"schema_version {version!r}: this reader knows ATIF v1 (up to {SCHEMA}); "
                                  f"a major version {m.group(1)} may change what its fields mean")


def read(data: dict[str, Any], task: str = "") -> Trajectory:
    check_version(data.get("schema_version"))
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not all(isinstance(s, dict) for s in raw_steps):
        raise TrajectoryFileError("ATIF `steps` must be a list of objects")
    extra = data.get("extra") if isinstance(data.get("extra"), dict) else {}
    if isinstance(extra.get("mirl"), dict):
        return _ours(data, extra["mirl"])
    agent = data.get("agent") if isinstance(data.get("agent"), dict) else {}
    original = str((agent.get("extra") or {}).get("original_format") or "")
    mini_text = "mini-swe-agent" in str(agent.get("name", "")) and not any(s.get("tool_calls") for s in raw_steps)
    terminus = str(agent.get("name", "")).startswith("terminus")
    parser = str(agent["extra"].get("parser") or "") if isinstance(agent.get("extra"), dict) else ""
    instruction, steps, final = "", [], ""
    agent_ids = [i for i, s in enumerate(raw_steps) if s.get("source") == "agent"]
    for i, raw in enumerate(raw_steps):
        if raw.get("source") == "user" and not instruction and not steps:
            instruction = _text(raw.get("message"))
            continue
        if raw.get("source") != "agent" or raw.get("is_copied_context"):
            continue
        message = _text(raw.get("message"))
        if terminus and not raw.get("tool_calls"):
            raw = _terminus_raw_step(raw, parser) or raw
        elif not raw.get("tool_calls") and not mini_text:
            raw = _text_function_step(raw) or raw
        got = _agent_steps(raw, mini_text, last=bool(agent_ids) and i == agent_ids[-1])
        if got and raw.get("message") != message:
            got[0].raw = message  # the reply as the model wrote it
        if not got:
            final = _text(raw.get("message"))
            continue
        _set_tokens(got[0], raw.get("metrics") if isinstance(raw.get("metrics"), dict) else {})
        got[0].meta["atif_step_id"] = raw.get("step_id")
        steps += got
    submitted = any(s.meta.get("submission") or (s.command and SUBMIT_MARKER in s.command) for s in steps)
    meta: dict[str, Any] = {"imported_from": str(data.get("schema_version") or "ATIF"),
                            "agent": {k: agent.get(k) for k in ("name", "version") if agent.get(k)}}
    if original:
        meta["original_format"] = original
    if final:
        meta["final_message"] = final
    if data.get("session_id"):
        meta["session_id"] = data["session_id"]
    model = agent.get("model_name")
    return Trajectory(task=task or str(data.get("session_id") or ""), seed=0,
                      models={"policy": model} if isinstance(model, str) and model else {},
                      instruction=instruction, steps=steps, exit_reason="submitted" if submitted else "",
                      meta=meta)


def read_continuations(path: Path, data: dict[str, Any], traj: Trajectory) -> Trajectory:
    """Follow `continued_trajectory_ref`: Terminus-2's `linear_history` ends `trajectory.json` at a
    context summarization and goes on in `trajectory.cont-1.json` (and so on), each naming the next.
    Their steps are appended to `traj`; a continuation that is missing is an error, not a short run."""
    seen = {path.resolve()}
    ref = data.get("continued_trajectory_ref")
    while isinstance(ref, str) and ref:
        nxt = path.parent / ref
        if nxt.resolve() in seen:
            raise TrajectoryFileError(f"continued_trajectory_ref {ref!r} loops back to a file already read")
        if not nxt.is_file():
            raise TrajectoryFileError(f"the episode continues in {ref} (its continued_trajectory_ref), "
                                      f"which is not next to it")
        seen.add(nxt.resolve())
        try:
            data = json.loads(nxt.read_text(encoding="utf-8", errors="replace"))
        except ValueError:
            raise TrajectoryFileError(f"its continuation {ref} is not valid JSON") from None
        if not sniff(data):
            raise TrajectoryFileError(f"its continuation {ref} is not an ATIF file")
        more = read(data)
        traj.steps += more.steps
        if more.exit_reason:
            traj.exit_reason = more.exit_reason
        if more.meta.get("final_message"):
            traj.meta["final_message"] = more.meta["final_message"]
        traj.meta.setdefault("continuations", []).append(ref)
        path = nxt
        ref = data.get("continued_trajectory_ref")
    return traj


# --- writing ------------------------------------------------------------------------------------


def _tokens_of(step: Step) -> dict[str, Any]:
    out = {}
    for name in TOKEN_FIELDS:
        value = getattr(step, STEP_TOKEN_FIELDS[name]) if name in STEP_TOKEN_FIELDS else step.meta.get(name)
        if value is not None:
            out[name] = value
    return out


def _kept(step: Step) -> dict[str, Any]:
    d = asdict(step)
    d.pop("output")
    for name in TOKEN_FIELDS:
        d.pop(STEP_TOKEN_FIELDS.get(name, name), None)
        d["meta"].pop(name, None)
    d.pop("tokens", None)
    return d


def to_atif(traj: Trajectory) -> dict[str, Any]:
    """Our trajectory as an ATIF document (re-read by `read`, it gives the same steps)."""
    from mirl.agent.miniswe import _reply_group

    model = traj.models.get("policy") or None
    steps: list[dict[str, Any]] = [{"step_id": 1, "source": "user", "message": traj.instruction}]
    i = 0
    while i < len(traj.steps):
        group = _reply_group(traj.steps, i)
        first, sid = group[0], len(steps) + 1
        calls, results = [], []
        for k, s in enumerate(group):
            if s.command is None:
                continue
            cid = f"call_{sid}_{k + 1}"
            calls.append({"tool_call_id": cid, "function_name": "bash", "arguments": {"command": s.command}})
            results.append({"source_call_id": cid, "content": s.output})
        if not calls:
            results = [{"content": first.output}]
        step: dict[str, Any] = {"step_id": sid, "source": "agent", "message": first.raw or first.reasoning}
        if model:
            step["model_name"] = model
        if first.reasoning and first.reasoning != step["message"]:
            step["reasoning_content"] = first.reasoning
        if calls:
            step["tool_calls"] = calls
        step["observation"] = {"results": results}
        step["metrics"] = {"prompt_tokens": sum(s.input_tokens for s in group),
                           "completion_tokens": sum(s.output_tokens for s in group), **_tokens_of(first)}
        step["extra"] = {"mirl": _kept(first) if len(group) == 1 else [_kept(s) for s in group]}
        steps.append(step)
        i += len(group)
    episode = {k: v for k, v in traj.to_dict().items() if k != "steps"}
    agent: dict[str, Any] = {"name": "mirl", "version": mirl.__version__}
    if model:
        agent["model_name"] = model
    return {
        "schema_version": SCHEMA,
        "session_id": f"{traj.task}.seed{traj.seed}",
        "agent": agent,
        "steps": steps,
        "final_metrics": {"total_prompt_tokens": sum(s.input_tokens for s in traj.steps),
                          "total_completion_tokens": sum(s.output_tokens for s in traj.steps),
                          "total_steps": len(steps)},
        "extra": {"mirl": episode},
    }
