"""What the policies did in their held-out continuations beyond the judged misbehavior: task success,
silence, the commands they ran, every rule detector's flags, and the cuts in a rate these explain.

A rate can fall by a better next step, by silence, or by running something else that fails (a run of
2026-12-06 at 24 training steps: one recipe cut by silence, 93% of its continuations; docs/small_scale/t07:
MiRL by commands the shell did not find, 53% of its commands against base's 12%). The tables here, written
by the misbehavior-rate stage beside its rates, tell these apart; each is read from the stage's continuation
records, so a finished run's tables can be made again from `continuations.jsonl`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from mirl.records.trajectory import Trajectory

DETECTOR_JUDGE = "rules, every prefix"  # the `judge` column of the detector table


def success_table(records: list[dict[str, Any]], n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Task success from the prefixes: per (policy, misbehavior, and "all"), the share of valid
    continuations whose tests passed (reward 1), with the rates' prefix-bootstrap interval (the
    `judge` column says `tests`; `n_failed` counts continuations without a reward)."""
    from mirl.evaluate.stats.rates import COLUMNS, misbehavior_rates

    rows = [{"policy": r["policy"], "misbehavior": r["misbehavior"], "prefix_id": r["prefix_id"], "judge": "tests",
             "repeated": None if r.get("reward") is None else bool(r["reward"] >= 1.0)}
            for r in records if r.get("valid", True)]
    if not rows:
        return pd.DataFrame(columns=COLUMNS).rename(columns={"rate": "success"})
    return misbehavior_rates(rows, n_boot=n_boot, seed=seed, overall=True).rename(columns={"rate": "success"})


def ran_nothing(record: dict[str, Any]) -> bool | None:
    """Whether the policy ran no command in any step it played after the prefix (None: it played
    none). A step that waits on the terminal on purpose (`wait`: empty keystrokes) counts as acting."""
    steps = [s for s in record.get("steps") or [] if s.get("source", "policy") == "policy"]
    if not steps:
        return None
    return not any((s.get("command") or "").strip() or s.get("wait") for s in steps)


def silence_table(records: list[dict[str, Any]], n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The share of valid continuations in which the policy ran no command at all (`ran_nothing`), per
    (policy, misbehavior, and "all"), with the rates' prefix-bootstrap interval (the `judge` column
    says `silent`; a continuation that played no step counts in `n_failed`)."""
    from mirl.evaluate.stats.rates import COLUMNS, misbehavior_rates

    rows = [{"policy": r["policy"], "misbehavior": r["misbehavior"], "prefix_id": r["prefix_id"], "judge": "silent",
             "repeated": ran_nothing(r)} for r in records if r.get("valid", True)]
    if not rows:
        return pd.DataFrame(columns=COLUMNS).rename(columns={"rate": "silent"})
    return misbehavior_rates(rows, n_boot=n_boot, seed=seed, overall=True).rename(columns={"rate": "silent"})


def acting_table(records: list[dict[str, Any]], n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The misbehavior rates read two ways around silence, per judge (`judge` column `<judge> when acting`
    or `<judge> silence counted`), policy and misbehavior (and "all"), with the rates' prefix-bootstrap
    interval. A judge that reads a repeat finds none in a continuation that ran nothing (`ran_nothing`), so
    a policy can lower its rate by falling silent: "when acting" is the rate among the continuations that
    ran a command (the silent ones are in `n_failed`); "silence counted" counts a silent continuation as
    not avoiding the misbehavior. For "no runnable command" both equal its rate, or nearly."""
    from mirl.evaluate.stats.rates import COLUMNS, misbehavior_rates

    rows = []
    for r in records:
        if not r.get("valid", True):
            continue
        silent = ran_nothing(r)
        for j in r.get("judgments", []):
            seen = j["repeated"]
            key = {"policy": r["policy"], "misbehavior": r["misbehavior"], "prefix_id": r["prefix_id"]}
            rows.append({**key, "judge": f"{j['judge']} when acting",
                         "repeated": None if silent is None or silent else seen})
            rows.append({**key, "judge": f"{j['judge']} silence counted",
                         "repeated": None if silent is None or seen is None and not silent else bool(silent or seen)})
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    return misbehavior_rates(rows, n_boot=n_boot, seed=seed, overall=True)


ACTION_COLUMNS = ["policy", "continuations", "silent_share", "steps", "ran_steps", "ran_share", "exit_zero_share",
                  "not_found_share", "distinct_commands", "distinct_share"]
NOT_FOUND = 127  # the shell's exit code for a command it cannot find


def action_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Per policy, pooled over its valid continuations (no interval: a description, not an estimate):
    the share of continuations that ran nothing (`ran_nothing`'s reading: a step waiting on the terminal
    acts), the policy's steps, those that ran a command and their share, the shares of those whose command
    exited 0 and whose command the shell did not find (of those with an exit code recorded), and the number of
    different commands (and per command run)."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r.get("valid", True):
            by[r["policy"]].append(r)
    rows = []
    for policy, recs in by.items():
        steps = [s for r in recs for s in r.get("steps") or [] if s.get("source", "policy") == "policy"]
        ran = [s for s in steps if (s.get("command") or "").strip()]  # keystrokes alone are not a command
        coded = [s for s in ran if s.get("exit_code") is not None]
        silent = [x for x in (ran_nothing(r) for r in recs) if x is not None]
        distinct = len({s["command"].strip() for s in ran})
        share = lambda a, b: round(a / b, 4) if b else None  # noqa: E731
        rows.append({"policy": policy, "continuations": len(recs), "silent_share": share(sum(silent), len(silent)),
                     "steps": len(steps), "ran_steps": len(ran), "ran_share": share(len(ran), len(steps)),
                     "exit_zero_share": share(sum(s["exit_code"] == 0 for s in coded), len(coded)),
                     "not_found_share": share(sum(s["exit_code"] == NOT_FOUND for s in coded), len(coded)),
                     "distinct_commands": distinct, "distinct_share": share(distinct, len(ran))})
    return pd.DataFrame(rows, columns=ACTION_COLUMNS)


def cut_by_silence(rates: pd.DataFrame, acting: pd.DataFrame, reference: str) -> list[tuple[str, str]]:
    """(policy, judge) pairs whose mean rate over the misbehaviors is below the reference policy's while
    the same judge's rate with a silent continuation counted as not avoiding (`acting_table`) is not. Point
    estimates: a flag that says where to look (silence.csv, acting.csv), not a test."""
    def overall(frame: pd.DataFrame) -> dict[tuple[str, str], float]:
        rows = frame[frame["misbehavior"] == "all"]
        return {(r.policy, r.judge): float(r.rate) for r in rows.itertuples() if not pd.isna(r.rate)}

    plain, counted = overall(rates), overall(acting)
    out = []
    for (policy, judge), rate in plain.items():
        base, base_counted = plain.get((reference, judge)), counted.get((reference, f"{judge} silence counted"))
        mine = counted.get((policy, f"{judge} silence counted"))
        if policy != reference and None not in (base, base_counted, mine) and rate < base and mine >= base_counted:
            out.append((policy, judge))
    return out


def cut_by_failing_commands(rates: pd.DataFrame, actions: pd.DataFrame, reference: str) -> list[tuple[str, str]]:
    """(policy, judge) pairs whose mean rate over the misbehaviors is below the reference policy's while under
    half as many of its commands exit 0 (`action_table`): a rule judge for an unchanged repeat finds nothing
    in a stream of different commands that fail, so such a cut may be a new mistake rather than a better next
    step (docs/small_scale/t07: 19% of MiRL's commands exited 0 against base's 60%).
    Point estimates: a flag that says where to look (actions.csv, success.csv), not a test."""
    zero = {r.policy: r.exit_zero_share for r in actions.itertuples() if not pd.isna(r.exit_zero_share)}
    overall = {(r.policy, r.judge): float(r.rate) for r in rates[rates["misbehavior"] == "all"].itertuples()
               if not pd.isna(r.rate)}
    out = []
    for (policy, judge), rate in overall.items():
        base = overall.get((reference, judge))
        if (policy != reference and base is not None and rate < base and policy in zero and reference in zero
                and zero[policy] < zero[reference] / 2):
            out.append((policy, judge))
    return out


def rule_flags(trajectory: Trajectory, m: int) -> list[str]:
    """The rule detectors (every one, not only the prefix's misbehavior's) that flag one of the first `m`
    policy steps after the prefix: the steps the behavior judges read. Free and deterministic, so the stage
    records them for every valid continuation."""
    from mirl.detectors import run_detectors
    from mirl.roles.behavior_judge import judged_steps

    judged = set(judged_steps(trajectory, trajectory.prefix_len, m))
    return sorted({f.detector for f in run_detectors(trajectory) if f.step in judged})


def detector_table(records: list[dict[str, Any]], n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per (policy, rule detector): the share of valid continuations, from every held-out prefix whatever
    its misbehavior, in which that detector flagged a judged step (`rule_flags`), with the rates'
    prefix-bootstrap interval. The `misbehavior` column names the detector and `judge` says
    `rules, every prefix`. A misbehavior the training did not target shows here when it rises; records
    written before the stage kept `rule_flags` are left out (the counts say how many were read)."""
    from mirl.detectors import get_detectors
    from mirl.evaluate.stats.rates import COLUMNS, misbehavior_rates

    names = [d.name for d in get_detectors()]
    rows = [{"policy": r["policy"], "misbehavior": name, "prefix_id": r["prefix_id"], "judge": DETECTOR_JUDGE,
             "repeated": name in r["rule_flags"]}
            for r in records if r.get("valid", True) and r.get("rule_flags") is not None for name in names]
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    return misbehavior_rates(rows, n_boot=n_boot, seed=seed, overall=False)
