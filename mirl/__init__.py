"""mirl: misbehavior-driven reinforcement learning for terminal agents."""

__version__ = "0.1.0"
