"""One episode: a policy proposes bash commands in a sandbox session until it submits or hits a limit.

Each step is one model call and at most one command. The loop is kept flat and small on purpose:
profiling (via `StepHook`) and prefix starts (via `prefix=`) plug into it instead of forking it,
so every stage produces trajectories with the same meaning.

Two ways to call the policy, in the same loop: when it offers a token-level generator (an engine,
or `local/...` through the client, see `policy_generator`), each prompt is the previous one's
token ids plus what followed (`mirl.agent.tokens.TokenPath`) and steps store completion ids and
logprobs; otherwise the chat messages are sent as text and steps say `tokens="none"`. Either way
a step's reasoning and command are parsed from the reply text, so everything downstream is the same.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
import traceback
from dataclasses import asdict
from typing import Any

from mirl.agent import prompts
from mirl.agent.config import SUBMIT_MARKER, AgentConfig
from mirl.agent.hooks import Discard, StepContext, StepHook
from mirl.agent.messages import build_messages, message_chars
from mirl.agent.parse import parse_reply
from mirl.agent.restore import restore_prefix
from mirl.agent.tokens import TokenPath
from mirl.engines.generator import ContextLengthError
from mirl.llm.errors import BudgetExceeded, LLMError
from mirl.llm.types import Completion, Model
from mirl.records.trajectory import Step, Trajectory
from mirl.sandbox.base import Sandbox, Session
from mirl.tasks import Task

log = logging.getLogger(__name__)

DEFAULT_CHARS_PER_TOKEN = 4.0


def is_submission(output: str) -> bool:
    """The agent ends its turn by printing the marker as the first line of a command's output."""
    first = output.lstrip().split("\n", 1)[0].strip()
    return first == SUBMIT_MARKER


class _Clock:
    """Accumulates wall time per bucket; what no bucket claims is the harness's own time."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.spent = {"model_s": 0.0, "sandbox_s": 0.0, "verify_s": 0.0, "hook_s": 0.0, "restore_s": 0.0}

    def add(self, bucket: str, since: float) -> float:
        dt = time.perf_counter() - since
        self.spent[bucket] += dt
        return dt

    def timings(self) -> dict[str, float]:
        total = time.perf_counter() - self.t0
        t = dict(self.spent)
        t["total_s"] = total
        t["own_s"] = max(0.0, total - sum(self.spent.values()))
        return {k: round(v, 6) for k, v in t.items()}


def step_seed(seed: int, step: int) -> int:
    """The sampling seed of an episode's step `step`: the episode's seed at step 0, a seed drawn from
    (seed, step) after it. One seed for every step would give each step the same random draws, so a
    small policy whose prompt barely changed (a format error shown back) repeats its reply word for
    word: a loop the sampler made, not the policy."""
    if step == 0:
        return seed
    digest = hashlib.sha256(f"{seed}@step{step}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF  # 31 bits: what hosted APIs accept


def _model_kwargs(config: AgentConfig, seed: int, step: int = 0) -> dict[str, Any]:
    kw: dict[str, Any] = {}
    if config.pass_seed:
        kw["seed"] = step_seed(seed, step)
    if config.temperature is not None:
        kw["temperature"] = config.temperature
    if config.max_output_tokens is not None:
        kw["max_tokens"] = config.max_output_tokens
    if config.action_format == "tool":
        kw["tools"] = [prompts.BASH_TOOL]
    return kw


def policy_generator(model: Any):
    """The token-level generator behind `model`, or None: a client role's (`RoleModel.generator()`,
    e.g. `local/smollm2` with the ledger), or the model itself when it is an engine."""
    get = getattr(model, "generator", None)
    if callable(get):
        return get()
    if callable(getattr(model, "generate_tokens", None)) and hasattr(model, "tokenizer"):
        return model
    return None


def _token_path(model: Any, config: AgentConfig, seed: int) -> TokenPath | None:
    generator = policy_generator(model) if config.token_ids else None
    if generator is None:
        return None
    sampling = {k: v for k, v in _model_kwargs(config, seed).items() if k != "tools"}  # tools live in the template
    return TokenPath(generator, config.action_format, sampling)


def run_episode(
    task: Task,
    sandbox: Sandbox | Session,
    model: Model,
    config: AgentConfig | None = None,
    seed: int = 0,
    hook: StepHook | None = None,
    prefix: list[Step] | None = None,
    snapshot: str | None = None,
) -> Trajectory:
    """Play one episode of `task` and return its trajectory (never raises for model/sandbox failures).

    `sandbox` is a Sandbox (a fresh session is started and closed here) or an already started
    Session (closed here too). With `prefix`, its commands are re-run first and the agent continues
    from the recorded outputs; with `snapshot` too, the session starts from that saved state of
    the prefix instead and nothing is re-run.
    """
    config = config or AgentConfig()
    clock = _Clock()
    models = {"policy": getattr(model, "name", type(model).__name__)}
    models.update(getattr(hook, "models", None) or {})
    traj = Trajectory(task=task.id, seed=seed, models=models, instruction=task.instruction,
                      sandbox=getattr(sandbox, "name", type(sandbox).__name__))
    traj.meta["action_format"] = config.action_format
    usage = {"calls": 0, "input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
    traj.meta["usage"] = usage
    session: Session | None = None
    try:
        if task.steps:  # one instruction per step, verified in turn: `mirl tasks run` plays them, this loop does not
            raise ValueError(f"task {task.id} has {len(task.steps)} steps; the agent loop plays single-step tasks only")
        t = time.perf_counter()
        if not hasattr(sandbox, "start"):
            session = sandbox
        else:
            session = sandbox.start(task, snapshot=snapshot) if snapshot else sandbox.start(task)
        clock.add("sandbox_s", t)
        if prefix:
            t = time.perf_counter()
            traj.steps, report = restore_prefix(session, list(prefix), timeout=config.command_timeout_s,
                                                rerun=snapshot is None)
            clock.add("restore_s", t)
            traj.prefix_len = len(traj.steps)
            traj.meta["restore"] = {**report.summary(), "mode": "snapshot" if snapshot else "rerun"}
            if config.on_restore_mismatch == "discard" and not report.normalized:
                traj.exit_reason = "discarded"
                traj.meta["discard_reason"] = f"prefix did not reproduce at step {report.summary()['first_mismatch']}"
        if not traj.exit_reason:
            tokens = _token_path(model, config, seed)
            _agent_loop(task, session, model, config, seed, hook, traj, clock, usage, tokens)
        if config.verify and traj.exit_reason not in ("discarded", "error"):
            t = time.perf_counter()
            v = session.verify()
            clock.add("verify_s", t)
            traj.reward, traj.verifier_tail, traj.verifier_error = v.reward, v.tail, v.error
    except BudgetExceeded:  # not this episode's fault: the stage stops, and the episode stays unplayed
        raise
    except Exception as e:  # a broken model or sandbox ends this episode, not the whole run
        traj.exit_reason = "error"
        traj.error = f"{type(e).__name__}: {e}"
        traj.meta["traceback"] = traceback.format_exc(limit=8)
        log.warning("episode %s seed %d failed: %s", task.id, seed, traj.error)
    finally:
        if session is not None:
            t = time.perf_counter()
            try:
                session.close()
            except Exception as e:
                log.warning("closing the session of %s failed: %s", task.id, e)
            clock.add("sandbox_s", t)
        traj.timings = clock.timings()
    return traj


def _agent_loop(task: Task, session: Session, model: Model, config: AgentConfig, seed: int,
                hook: StepHook | None, traj: Trajectory, clock: _Clock, usage: dict[str, Any],
                tokens: TokenPath | None = None) -> None:
    timeout = config.agent_timeout_s if config.agent_timeout_s is not None else task.agent_timeout_s
    deadline = time.monotonic() + timeout if timeout is not None else math.inf  # None: the task sets no limit
    chars_per_token = DEFAULT_CHARS_PER_TOKEN
    first_prompt: float | None = None  # the context before the agent's first turn here: a response counts from it
    if tokens is not None:  # the chat template renders the first prompt only; the rest is appended
        tokens.start(traj, build_messages(task.instruction, [], config.action_format, config.system_prompt,
                                          config.instance_prompt))
    while True:
        if len(traj.steps) >= config.max_steps:
            traj.exit_reason = "step_limit"
            return
        if time.monotonic() >= deadline:
            traj.exit_reason = "agent_timeout"
            return
        messages = build_messages(task.instruction, traj.steps, config.action_format,
                                  config.system_prompt, config.instance_prompt)
        chars = message_chars(messages)
        context = len(tokens.ids) if tokens is not None else chars / chars_per_token
        if first_prompt is None:  # in ids on the token path, in characters on the text path
            first_prompt = len(tokens.ids) if tokens is not None else chars
        response = len(tokens.ids) - first_prompt if tokens is not None else (chars - first_prompt) / chars_per_token
        if context >= config.max_context_tokens:
            traj.exit_reason = "token_limit"
            traj.meta["context_tokens_estimate"] = int(context)
            return
        if config.max_response_tokens and response >= config.max_response_tokens:
            traj.exit_reason = "token_limit"
            traj.meta["response_tokens_estimate"] = int(response)
            return

        kwargs = _model_kwargs(config, seed, len(traj.steps))
        t = time.perf_counter()
        sample = None
        try:
            if tokens is not None:
                gen, sample = tokens.sample(step_seed(seed, len(traj.steps)))  # in-process: always seeded
                completion = Completion(
                    text=tokens.glue.text(sample.ids), model=traj.models["policy"], input_tokens=gen.prompt_tokens,
                    cached_input_tokens=gen.cached_tokens, output_tokens=len(sample.ids),
                    cost_usd=float(gen.meta.get("cost_usd", 0.0)), latency_s=gen.seconds,
                    finish_reason=sample.finish_reason)
            else:
                completion = model.complete(messages, n=1, **kwargs)[0]
        except (LLMError, ContextLengthError) as e:
            if (isinstance(e, LLMError) and e.kind != "context_length") or len(traj.steps) <= traj.prefix_len:
                raise  # at the episode's first sample the window can never fit: a setting to fix, not a failure
            # the model's window is full: the episode ends as at max_context_tokens, and is verified
            # (an infrastructure error would drop a long, failing rollout out of its group)
            clock.add("model_s", t)
            traj.exit_reason = "token_limit"
            traj.meta["context_error"] = str(e)[:500]
            return
        clock.add("model_s", t)
        usage["calls"] += 1
        usage["input_tokens"] += completion.input_tokens
        usage["cached_input_tokens"] += completion.cached_input_tokens
        usage["output_tokens"] += completion.output_tokens
        usage["cost_usd"] += completion.cost_usd
        if completion.input_tokens > 0 and chars > 0:  # calibrate the estimate on the real tokenizer
            chars_per_token = chars / completion.input_tokens

        parsed = parse_reply(config.action_format, completion.text, completion.tool_calls)
        step = Step(reasoning=parsed.reasoning, command=parsed.command, raw=completion.text or "",
                    input_tokens=completion.input_tokens, output_tokens=completion.output_tokens, tokens="none")
        if sample is not None:
            step.tokens, step.completion_ids, step.logprobs = "sampled", list(sample.ids), list(sample.logprobs)
        if parsed.tool_calls:
            step.meta["tool_calls"] = parsed.tool_calls
        if parsed.error:
            step.meta["format_error"] = parsed.error

        if hook is not None:
            t = time.perf_counter()
            verdict = hook.review(StepContext(task=task, seed=seed, messages=messages, steps=list(traj.steps),
                                              proposed=step, config=config))
            clock.add("hook_s", t)
            if isinstance(verdict, Discard):
                traj.exit_reason = "discarded"
                traj.meta["discard_reason"] = verdict.reason
                traj.meta["discarded_step"] = asdict(step)
                return
            if verdict is not step:
                verdict.meta.setdefault("proposed", asdict(step))
                step = verdict
        if tokens is not None:
            tokens.settle(step)  # a replacement (teacher) is tokenized as context
        elif not step.tokens:
            step.tokens = "none"  # a replacement on the text path has no ids either

        if step.command is None:
            step.output = prompts.format_error(config.action_format, step.meta.get("format_error", "none"))
        else:
            remaining = deadline - time.monotonic()
            t = time.perf_counter()
            res = session.run(step.command, timeout=max(1.0, min(config.command_timeout_s, remaining)))
            clock.add("sandbox_s", t)
            step.output, step.exit_code, step.timed_out = res.output, res.exit_code, res.timed_out
            step.duration_s = round(res.duration_s, 6)
        traj.steps.append(step)
        if tokens is not None:
            tokens.observe(step, len(traj.steps) - 1)
        if step.command is not None and is_submission(step.output):
            traj.exit_reason = "submitted"
            return
