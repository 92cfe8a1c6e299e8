"""RL from misbehavior prefixes, the learner's side: group advantages centered on the group mean with
dead groups (no reward spread) dropped and refilled, and the policy losses that turn sampled tokens,
their sampler log-probabilities and those advantages into a gradient (DPPO, and a GRPO/DAPO clipped
surrogate to compare against). Modules are imported by name; the package itself pulls in nothing.
"""
