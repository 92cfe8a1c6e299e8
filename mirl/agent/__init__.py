"""The terminal-agent harness: steps, episodes, trajectories."""

from mirl.agent.config import AgentConfig
from mirl.agent.episode import run_episode
from mirl.agent.hooks import Discard, StepContext, StepHook
from mirl.agent.trajectory import Step, Trajectory, load_trajectories, steps_frame, trajectories_frame

__all__ = ["AgentConfig", "Discard", "Step", "StepContext", "StepHook", "Trajectory", "load_trajectories",
           "run_episode", "steps_frame", "trajectories_frame"]
