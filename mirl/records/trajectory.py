"""Trajectory records: what one episode of an agent in a sandbox did, step by step.

Stored as one JSON object per line (see `mirl.jsonl`), loadable into pandas with
`mirl.records.trajectory.steps_frame`. A step with no runnable command keeps `command=None`: such
steps are data (one of the misbehaviors studied), not noise.

Token ids (for RL; see `mirl.agent.tokens`): when the policy offers a generator, the trajectory
stores the first prompt's ids once (`prompt_ids`) and each step its `completion_ids` (with the
sampler's `logprobs`, same length, when sampled) and `observation_ids`; every turn's exact prompt
is rebuilt from those (`mirl.agent.tokens.turn_prompts`), so no step stores a whole prompt.
`Step.tokens` says what the ids are: "sampled" (drawn by the sampler, logprobs given),
"context" (text tokenized by the harness: teacher, restored and imported steps; no logprobs,
never trained on), "none" (the model returned text only, e.g. a remote API), "" (an older record).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

SCHEMA_VERSION = 1


@dataclass
class Step:
    """One agent step: a reasoning block and at most one bash command, with what running it gave."""

    reasoning: str
    command: str | None  # None when the reply had no runnable command
    output: str = ""  # what the agent was shown (for command=None: the format error message)
    exit_code: int | None = None
    duration_s: float = 0.0
    timed_out: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    source: Literal["policy", "teacher", "prefix", "reference"] = "policy"
    raw: str = ""  # the model's full reply, as it came
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. localizer verdicts attached by profiling
    tokens: Literal["sampled", "context", "none", ""] = ""  # what completion_ids are (module docstring)
    completion_ids: list[int] | None = None  # the reply's ids, the end-of-turn token included
    logprobs: list[float] | None = None  # the sampler's logprob of each completion id (sampled steps only)
    observation_ids: list[int] | None = None  # glue + observation + glue up to the next generation prompt

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Step:
        missing = [k for k in ("reasoning", "command") if k not in d]
        if missing:  # said as the record's problem, not as the constructor's TypeError
            raise ValueError(f"a step needs {' and '.join(repr(k) for k in missing)} (got {', '.join(map(repr, d)) or 'no fields'})")
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


@dataclass
class Trajectory:
    """One episode: task, seed, models, steps, reward and timings."""

    task: str
    seed: int
    models: dict[str, str]  # role -> model name, e.g. {"policy": "local/smollm2"}
    instruction: str = ""
    steps: list[Step] = field(default_factory=list)
    reward: float | None = None
    verifier_tail: str = ""
    verifier_error: str | None = None
    exit_reason: str = ""  # submitted | step_limit | agent_timeout | token_limit | error | discarded
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)  # model_s, sandbox_s, verify_s, total_s
    prefix_len: int = 0  # steps restored from a prefix before the agent took over
    sandbox: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    schema: int = SCHEMA_VERSION
    prompt_ids: list[int] | None = None  # the first prompt's ids (token path only; see the module docstring)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        d = dict(d)
        steps = []
        for i, s in enumerate(d.pop("steps", [])):
            if not isinstance(s, dict):
                raise ValueError(f"step {i} is not an object, got {type(s).__name__}")
            try:
                steps.append(Step.from_dict(s))
            except ValueError as e:
                raise ValueError(f"step {i}: {e}") from None
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(steps=steps, **known)

    @property
    def key(self) -> tuple[str, int]:
        return (self.task, self.seed)


# --- loading and tables ---------------------------------------------------------------------------


class RecordError(ValueError):
    """A stored record that cannot be read; the message names the file, the record and the problem."""


def _checked(r: dict[str, Any]) -> Trajectory:
    schema = r.get("schema", SCHEMA_VERSION)
    if not isinstance(schema, int) or isinstance(schema, bool) or schema > SCHEMA_VERSION:
        raise ValueError(f"schema {schema!r} is not one this mirl reads (schema {SCHEMA_VERSION} or older)")
    if not isinstance(r.get("task"), str) or not isinstance(r.get("seed"), int):
        raise ValueError("'task' must be a string and 'seed' an integer")
    steps = r.get("steps", [])
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise ValueError("'steps' must be a list of step objects")
    return Trajectory.from_dict(r)


def load_trajectories(path) -> list[Trajectory]:
    """Every complete trajectory in a JSONL file (a torn last line from a kill is skipped); a line
    that is not JSON or a record that is not a trajectory is a `RecordError` naming file and record."""
    from mirl.jsonl import read_jsonl

    records, report = read_jsonl(path)
    if report.bad_lines:
        raise RecordError(f"{path}: line {report.bad_lines[0]} is not a JSON object (a corrupt trajectory file)")
    out = []
    for i, r in enumerate(records, 1):
        try:
            out.append(_checked(r))
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise RecordError(f"{path}: record {i} is not a trajectory: {e}") from None
    return out


def _as_trajectories(data) -> list[Trajectory]:
    if isinstance(data, (str, bytes)) or hasattr(data, "__fspath__"):
        return load_trajectories(data)
    return [t if isinstance(t, Trajectory) else Trajectory.from_dict(t) for t in data]


def trajectories_frame(data):
    """One row per episode: key, outcome, step counts, tokens and timings (a pandas DataFrame).

    `data` is a JSONL path or a list of `Trajectory` / record dicts.
    """
    import pandas as pd

    rows = []
    for t in _as_trajectories(data):
        own = [s for s in t.steps if s.source != "prefix"]
        rows.append({
            "task": t.task, "seed": t.seed, "policy": t.models.get("policy", ""), "reward": t.reward,
            "exit_reason": t.exit_reason, "n_steps": len(t.steps), "prefix_len": t.prefix_len,
            "n_format_errors": sum(s.command is None for s in own),
            "n_teacher_steps": sum(s.source == "teacher" for s in own),
            "input_tokens": sum(s.input_tokens for s in own), "output_tokens": sum(s.output_tokens for s in own),
            "verifier_error": t.verifier_error, "error": t.error, "sandbox": t.sandbox,
            **{k: v for k, v in t.timings.items()},
        })
    return pd.DataFrame(rows)


def steps_frame(data):
    """One row per step with its episode's key and outcome (a pandas DataFrame)."""
    import pandas as pd

    rows = []
    for t in _as_trajectories(data):
        for i, s in enumerate(t.steps):
            rows.append({
                "task": t.task, "seed": t.seed, "step": i, "source": s.source, "reasoning": s.reasoning,
                "command": s.command, "output": s.output, "exit_code": s.exit_code, "duration_s": s.duration_s,
                "timed_out": s.timed_out, "input_tokens": s.input_tokens, "output_tokens": s.output_tokens,
                "format_error": s.command is None, "reward": t.reward, "exit_reason": t.exit_reason,
                "tokens": s.tokens,
            })
    return pd.DataFrame(rows)
