"""Parameters of the profiling stage (notebook 01, `params/*.yaml` section `profiling`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class ProfilingParams:
    """Flat on purpose: these are the literals of notebook 01's parameters cell."""

    tasks: str = field(default="tasks", metadata={"help": "task pool: a directory of tasks, or comma-separated task dirs"})
    max_tasks: int = field(default=0, metadata={"help": "use only the first N tasks (sorted by id); 0 = all"})
    seeds: int = field(default=2, metadata={"help": "rollout seeds per environment (paper: 2)"})
    workers: int = field(default=2, metadata={"help": "episodes run in parallel"})
    ray_address: str = field(default="", metadata={"help": "run episodes on this Ray cluster instead of local workers"})
    sandbox: str = field(default="auto", metadata={"help": "auto | docker | bwrap | local"})
    action_format: Literal["text", "tool"] = field(default="text", metadata={"help": "policy step format: fenced bash block or bash tool call"})
    max_steps: int = field(default=64, metadata={"help": "step limit per episode (paper: 64)"})
    command_timeout_s: float = field(default=60.0, metadata={"help": "per-command timeout in the sandbox"})
    policy_model: str = field(default="local/smollm2", metadata={"help": "policy model (litellm name; local/smollm2 = embedded)"})
    policy_api_base: str = field(default="", metadata={"help": "OpenAI-compatible server of the policy, if any"})
    policy_temperature: float = field(default=1.0, metadata={"help": "policy sampling temperature (paper: 1.0)"})
    policy_max_tokens: int = field(default=384, metadata={"help": "max tokens per policy reply"})
    localizer: Literal["rules", "llm", "both"] = field(default="rules", metadata={"help": "error localizer: rule detectors, an LLM, or both (flag if either flags)"})
    localizer_model: str = field(default="", metadata={"help": "localizer LLM (litellm name), for localizer=llm|both"})
    teacher: Literal["reference", "llm"] = field(default="reference", metadata={"help": "teacher: replay the reference solution, or an LLM"})
    teacher_model: str = field(default="", metadata={"help": "teacher LLM (litellm name), for teacher=llm"})
    roles_api_base: str = field(default="", metadata={"help": "OpenAI-compatible server of the localizer and teacher, if any"})
    api_key_env: str = field(default="", metadata={"help": "NAME of the environment variable holding the roles' API key (never the key)"})
    role_temperature: float = field(default=0.7, metadata={"help": "localizer/teacher sampling temperature (paper: 0.7)"})
    teacher_tries: int = field(default=3, metadata={"help": "failed corrections before the rollout is discarded (paper: 3)"})
    budget_usd: float = field(default=0.0, metadata={"help": "stop the stage cleanly once LLM spend reaches this; 0 = no cap"})
    examples: int = field(default=8, metadata={"help": "flagged steps shown in the notebook"})
