"""The terminal-agent harness: episodes, hooks, prompts, prefix restore and rollouts.

The records it writes (`Step`, `Trajectory`) live in `mirl.records`.
"""

from mirl.agent.config import AgentConfig
from mirl.agent.episode import run_episode
from mirl.agent.hooks import Discard, StepContext, StepHook

__all__ = ["AgentConfig", "Discard", "StepContext", "StepHook", "run_episode"]
