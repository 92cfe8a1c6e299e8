"""The terminal-agent harness: steps, episodes, trajectories."""
