"""A small run directory to curate: profiling output (error steps and their trajectories) and a saved
taxonomy version 1, written with the records classes so every count is known by hand.

    type                    steps (of 10)                                         steps  envs
    acts without looking    count-lines/0/1, count-lines/0/2, fix-permissions/0/1,
                            parse-logs/0/1                                        4      3     kept (>= 0.25)
    omits runnable command  count-lines/0/3, fix-permissions/0/2                  2      2     long tail
    declares done early     count-lines/1/2, parse-logs/0/4                       2      2     long tail
    repeats failed command  fix-permissions/0/1, parse-logs/0/2                   2      2     long tail
    (none: one_off)         count-lines/1/0
"""

from __future__ import annotations

import json
from pathlib import Path

from mirl.records.error_step import ErrorStep
from mirl.records.taxonomy import ErrorType, Label, Taxonomy, TaxonomyStore
from mirl.records.trajectory import Step, Trajectory
from mirl.taxonomy.stats import apply_threshold, type_stats

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
A, B, C, D = "acts without looking", "omits runnable command", "declares done early", "repeats failed command"
THRESHOLD = 0.25
# (env, seed) -> the commands of its trajectory (None: a reply without a command)
TRAJECTORIES = {
    ("count-lines", 0): ["ls", "wc -l data.txt", "cat data.txt", None],
    ("count-lines", 1): ["ls", "wc -l data.txt", SUBMIT],
    ("fix-permissions", 0): ["ls -l /app", "chmod 777 /app", None],
    ("parse-logs", 0): ["ls /var/log", "grep error app.log", "cat app.log | head", "cat app.log | head", SUBMIT],
}
# id -> (reason, description, types)
FLAGGED = {
    "count-lines/0/1": ("counted lines before reading the file", "counts lines", [A]),
    "count-lines/0/2": ("printed the file only after counting", "prints the file", [A]),
    "count-lines/0/3": ("the reply had no runnable command", "", [B]),
    "count-lines/1/0": ("listed the directory twice", "lists files", []),
    "count-lines/1/2": ("submitted without checking the count", "submits", [C]),
    "fix-permissions/0/1": ("opened permissions without looking, again", "changes modes", [A, D]),
    "fix-permissions/0/2": ("the reply had no runnable command", "", [B]),
    "parse-logs/0/1": ("searched a log it never listed", "searches the log", [A]),
    "parse-logs/0/2": ("repeated the same failing pipeline", "shows the log head", [D]),
    "parse-logs/0/4": ("submitted without checking the output", "submits", [C]),
}
DEFINITIONS = {A: "acts on files or output it has not inspected; not a repeat",
               B: "the reply has no runnable bash block; not a wrong command",
               C: "submits before checking the result; not a failed check",
               D: "reruns a command that failed, unchanged; not a new attempt"}


def make_run(root: Path) -> Path:
    """Write the run at `root` (profiling/ and taxonomy/ v1) and return it."""
    steps = []
    for sid, (reason, description, _) in FLAGGED.items():
        env, seed, index = sid.rsplit("/", 2)
        command = TRAJECTORIES[(env, int(seed))][int(index)]
        steps.append(ErrorStep(env=env, seed=int(seed), step=int(index), rejected_command=command, reason=reason,
                               description=description, source="llm:judge",
                               prefix={"file": "trajectories.jsonl", "task": env, "seed": int(seed),
                                       "steps": int(index)}))
    prof = root / "profiling"
    prof.mkdir(parents=True)
    (prof / "error_steps.jsonl").write_text("".join(json.dumps(s.to_dict()) + "\n" for s in steps))
    trajectories = [Trajectory(task=env, seed=seed, models={"policy": "scripted"},
                               steps=[Step(reasoning="", command=c, output=f"output of step {i} of {env}/{seed}")
                                      for i, c in enumerate(commands)])
                    for (env, seed), commands in TRAJECTORIES.items()]
    (prof / "trajectories.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in trajectories))
    types = [ErrorType(name, DEFINITIONS[name], [i for i, (_, _, ts) in FLAGGED.items() if name in ts][:5],
                       provenance="hand-made") for name in (A, B, C, D)]
    labels = [Label(i, list(ts), None if ts else "one_off") for i, (_, _, ts) in FLAGGED.items()]
    tax = Taxonomy(types=types, note="hand-made", threshold=THRESHOLD)
    apply_threshold(tax, type_stats(tax, labels, steps), THRESHOLD)
    TaxonomyStore(root / "taxonomy").save(tax, labels)
    return root
