"""Detector precision and recall on hand-labelled trajectories (real public runs and hand-written ones).

Each detector's flags over the labelled set are compared with tests/data/labels.json, step by step.
The table is printed (run with -s to see it); a detector under 0.8 precision or recall fails.
"""

import json
from pathlib import Path

import pytest

from mirl.detectors.catalog import get_detectors, run_detectors
from mirl.sources import read_source

DATA = Path(__file__).parent.parent / "data"
LABELS = json.loads((DATA / "labels.json").read_text())["labels"]
MIN = 0.8


def _flags_and_labels():
    seen, wanted = set(), set()
    for key, steps in LABELS.items():
        path, _, k = key.partition("#")
        traj = read_source(DATA / path)[int(k or 0)]
        seen |= {(key, f.step, f.detector) for f in run_detectors(traj)}
        wanted |= {(key, int(i), d) for i, names in steps.items() for d in names}
    return seen, wanted


def scores():
    seen, wanted = _flags_and_labels()
    table = {}
    for det in get_detectors():
        s = {x for x in seen if x[2] == det.name}
        w = {x for x in wanted if x[2] == det.name}
        tp = len(s & w)
        table[det.name] = (tp, len(s - w), len(w - s), tp / len(s) if s else None, tp / len(w) if w else None)
    return table


def test_every_detector_has_labelled_cases():
    wanted = {d for steps in LABELS.values() for names in steps.values() for d in names}
    assert wanted == {d.name for d in get_detectors()}


def test_precision_and_recall_per_detector():
    table = scores()
    print(f"\n{'detector':<34} {'tp':>3} {'fp':>3} {'fn':>3} {'precision':>9} {'recall':>6}")
    for name, (tp, fp, fn, p, r) in table.items():
        print(f"{name:<34} {tp:>3} {fp:>3} {fn:>3} {p if p is None else f'{p:.2f}':>9} {r if r is None else f'{r:.2f}':>6}")
    low = {n: (p, r) for n, (_, _, _, p, r) in table.items() if p is None or r is None or p < MIN or r < MIN}
    assert not low, f"detectors under {MIN} precision or recall: {low}"


@pytest.mark.parametrize("key", sorted(k for k in LABELS if "swebench_mini1" in k or "harbor/" in k))
def test_real_runs_get_exactly_the_hand_labels(key):
    """On the real public runs the rules give the flags a person gave, no more and no fewer."""
    path, _, k = key.partition("#")
    traj = read_source(DATA / path)[int(k or 0)]
    got = {(f.step, f.detector) for f in run_detectors(traj)}
    assert got == {(int(i), d) for i, names in LABELS[key].items() for d in names}
