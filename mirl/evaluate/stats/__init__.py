"""The statistics of evaluation: misbehavior rates on held-out prefixes with prefix-clustered
intervals, agreement between judges, benchmark scores over runs and per task (Terminal-Bench's
leaderboard form), paired comparisons, standard error against the number of seeds, and pass@k.

Every function takes plain records (dicts, or objects with the same attributes) and returns numbers
or pandas tables; nothing here calls a model or a sandbox. Modules are imported by name.
"""
