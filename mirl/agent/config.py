"""Parameters of one agent episode (`AgentConfig`); the rollout runner's are in `mirl.agent.rollout`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@dataclass
class AgentConfig:
    """How the agent talks to its model and when an episode ends."""

    action_format: Literal["text", "tool"] = field(
        default="text",
        metadata={"help": "text: one fenced ```bash block in the reply (mini-swe-agent text mode); "
                          "tool: one `bash` tool call (mini-swe-agent tool-calling mode, TMax)"},
    )
    max_steps: int = field(default=64, metadata={"min": 1, "help": "step limit, counting restored prefix steps"})
    agent_timeout_s: float | None = field(
        default=None, metadata={"above": 0, "help": "wall-clock limit of the agent's turn; None: the task's agent timeout"})
    max_context_tokens: int = field(
        default=32768, metadata={"min": 1, "help": "end the episode when the next prompt would reach this many tokens"})
    max_response_tokens: int = field(
        default=0, metadata={"min": 0, "help": "end the episode when the tokens after its first prompt (the agent's replies and the "
                                     "tool outputs, a response as open-instruct counts it) reach this before a turn; "
                                     "0 = no cap (paper: 65,536; the per-turn cap is models.policy.max_tokens, 16,384)"})
    command_timeout_s: float = field(default=120.0, metadata={"above": 0, "help": "per-command timeout in the sandbox"})
    temperature: float | None = field(
        default=None, metadata={"min": 0, "help": "per-call temperature for a model used without the LLM client; in a params file leave it "
                          "empty and set models.policy.temperature"})
    max_output_tokens: int | None = field(
        default=None, metadata={"min": 1, "help": "per-call reply cap for a model used without the LLM client; in a params file leave it "
                          "empty and set models.policy.max_tokens"})
    pass_seed: bool = field(
        default=True, metadata={"help": "pass a seed to the model so episodes differ reproducibly: the episode's seed at step 0, "
                          "then one drawn from (seed, step) (`mirl.agent.episode.step_seed`); off for a hosted API that refuses "
                          "a seed (an in-process sampler is always seeded)"})
    token_ids: bool = field(
        default=True, metadata={"help": "when the policy offers a token-level generator (local/... models, engines), "
                                        "build prompts from token ids and store ids and logprobs per step"})
    verify: bool = field(default=True, metadata={"help": "run the task's tests after the episode for the reward"})
    on_restore_mismatch: Literal["continue", "discard"] = field(
        default="continue",
        metadata={"help": "when a prefix command's output does not reproduce (normalized): go on, or discard"},
    )
    system_prompt: str = field(
        default="", metadata={"help": "system prompt template; empty: the built-in one for action_format"})
    instance_prompt: str = field(
        default="", metadata={"help": "first user message template ({instruction}); empty: the built-in one"})
