"""The prefix stage on the common runner: sample prefixes at misbehaviors, check that each restores.

Plan: for every kept misbehavior of the taxonomy version, the error steps labelled with it are
drawn round-robin over environments (so one busy environment cannot fill the set), with a seed:
the training ones (`per_misbehavior` each) and each misbehavior's queue of held-out candidates, whose
first `heldout_per_misbehavior` are set aside before the training sample and whose rest are the error
steps no training prefix uses. Held-out prefixes are counted after the rerun check, as the paper's
"20 newly sampled ... unseen in training" are: the candidates are checked in waves, each as large as
the number still missing, until `heldout_per_misbehavior` are kept or the queue is used up (the
summary says which, per misbehavior). The sample is written once (`sampled.jsonl`); which candidates
a wave adds follows from the checks already recorded, so a killed run plans the same waves again.

Items: one check per sampled prefix, in a fresh sandbox of its environment: re-run the prefix's
commands one by one and compare each output with the recorded one, exactly and normalized (volatile
tokens masked, see `mirl.agent.restore`). With `snapshot`, a reproduced prefix's sandbox state is
saved and restored in another fresh sandbox, where the last prefix command must print what it
printed (a snapshot holds files, not running processes: prefixes that start background processes
are not snapshot-kept, see `starts_processes`).

Finalize: `prefixes.jsonl` (every sampled prefix with its verdict per mode, divergence and restore
handle), `train.jsonl` and `heldout.jsonl` (kept under `prefixes.keep`), and the funnel in the summary.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirl.agent.restore import restore_prefix
from mirl.jsonl import read_jsonl
from mirl.records.error_step import ErrorStep
from mirl.records.loaders import load_error_steps
from mirl.records.prefix import MODES, Prefix
from mirl.records.taxonomy import Label
from mirl.records.trajectory import Trajectory
from mirl.runner.inputs import (
    HELDOUT,
    PREFIXES,
    TRAIN,
    EpisodeInputs,
    taxonomy_store,
)
from mirl.runner.layout import atomic_write_jsonl
from mirl.runner.stage import Item, Stage, run_stage

if TYPE_CHECKING:
    from mirl.params import Params

log = logging.getLogger(__name__)
STAGE = "prefixes"
SAMPLED, CHECKS = "sampled.jsonl", "checks.jsonl"
# what a restored filesystem must match when no later step can probe it: every file's path, mode and size,
# and a digest of the contents, under the places an agent writes (not /proc, /sys, /dev, /tmp, nor the
# three files the container engine writes per container)
STATE_DIGEST = ("find / -xdev \\( -path /proc -o -path /sys -o -path /dev -o -path /tmp -o -path /run -o -path /etc/hostname "
                "-o -path /etc/hosts -o -path /etc/resolv.conf \\) -prune "
                "-o -printf '%p %m %s\\n' 2>/dev/null | sort | md5sum; "
                "find /app /root /etc -xdev -type f ! -path /etc/hostname ! -path /etc/hosts ! -path /etc/resolv.conf "
                "-print0 2>/dev/null | sort -z | xargs -0 cat 2>/dev/null | md5sum")  # the engine writes those three
_BACKGROUND = re.compile(r"(^|[^&])&\s*($|[;\n)])|\bnohup\b|\bsetsid\b|\bdisown\b|\bservice\s+\S+\s+(start|restart)\b|"
                         r"\bsystemctl\s+(start|restart)\b|\b(daemon|--daemon|-d)\b.*\b(redis|nginx|mysqld|postgres)")


def starts_processes(commands: list[str]) -> bool:
    """Whether a prefix leaves processes running (background jobs, services): a snapshot cannot hold them."""
    return any(_BACKGROUND.search(c or "") for c in commands)


def round_robin(items_by_env: dict[str, list[Any]], n: int, rng: random.Random) -> list[Any]:
    """Up to `n` items taken one environment at a time (environments and items in seeded order)."""
    envs = sorted(items_by_env)
    rng.shuffle(envs)
    queues = {e: list(items_by_env[e]) for e in envs}
    for q in queues.values():
        rng.shuffle(q)
    out: list[Any] = []
    while len(out) < n and any(queues.values()):
        for e in envs:
            if queues[e] and len(out) < n:
                out.append(queues[e].pop())
    return out


def sample_prefixes(misbehaviors: list[str], labels: list[Label], steps: list[ErrorStep], per: int, heldout: int,
                    seed: int, start: Callable[[ErrorStep], Any] | None = None) -> list[Prefix]:
    """Training prefixes (`per` per misbehavior, spread over environments), then, when `heldout` > 0,
    each misbehavior's queue of held-out candidates in a seeded round-robin order (the stage checks a
    queue's head in waves: `heldout_waves`). The first `heldout` of every queue are set aside before
    the training sample is drawn (so that a small run still has held-out prefixes); the rest of a
    queue is every error step carrying the misbehavior that no training prefix uses.

    `start(step)` names what a prefix starts the policy from (`prefix_start`): two error steps with the
    same start are one prefix to the policy (a step-0 error of two seeds: both start at the task), so
    training leaves out the starts set aside and the held-out queues leave out the starts trained on."""
    start = start or (lambda s: s.id)
    by_id = {s.id: s for s in steps}
    carrying: dict[str, list[ErrorStep]] = defaultdict(list)
    for label in labels:
        for t in label.types:
            if label.id in by_id:
                carrying[t].append(by_id[label.id])

    def spread(m: str, kind: str, n: int, leave: set[Any]) -> list[ErrorStep]:
        by_env: dict[str, list[ErrorStep]] = defaultdict(list)
        for s in sorted(carrying[m], key=lambda s: s.id):
            if start(s) not in leave:
                by_env[s.env].append(s)
        return round_robin(by_env, n, random.Random(f"{seed}:{kind}:{m}"))

    order = {m: spread(m, "heldout", len(carrying[m]), set()) for m in misbehaviors} if heldout > 0 else {}
    aside = {start(s) for m in order for s in order[m][:heldout]}
    out: list[Prefix] = []
    trained: set[Any] = set()
    for m in misbehaviors:
        drawn = spread(m, "train", per, aside)
        trained |= {start(s) for s in drawn}
        out += [_prefix(m, s, "train") for s in drawn]
    for m in order:
        out += [_prefix(m, s, "heldout") for s in order[m] if start(s) not in trained]
    return out


def prefix_start(trajectories: dict[tuple[str, int], Trajectory]) -> Callable[[ErrorStep], Any]:
    """What an error step's prefix shows the policy: its environment and every earlier step's reply,
    command, output and exit code (the error step's own id when its trajectory is missing)."""
    def start(s: ErrorStep) -> Any:
        traj = trajectories.get((s.env, s.seed))
        if traj is None:
            return s.id
        return (s.env, tuple((x.raw or x.reasoning, x.command, x.output, x.exit_code) for x in traj.steps[:s.step]))
    return start


def heldout_waves(queue: list[Prefix], checked: dict[str, Prefix], want: int, keep: str) -> list[Prefix]:
    """The head of one misbehavior's held-out queue to check: `want` candidates first, then, once all
    of a wave are checked, as many more as are still missing, until `want` are kept (under `keep`) or
    the queue is used up. Never more than `want` are kept."""
    n = min(want, len(queue))
    while True:
        head = queue[:n]
        if any(p.id not in checked for p in head):
            return head
        kept = sum(checked[p.id].kept(keep) for p in head)
        if kept >= want or n >= len(queue):
            return head
        n = min(len(queue), n + want - kept)


def _prefix(misbehavior: str, s: ErrorStep, split: str) -> Prefix:
    return Prefix(id=f"{misbehavior}|{s.id}", misbehavior=misbehavior, error_id=s.id, env=s.env, seed=s.seed,
                  steps=s.step, split=split)  # type: ignore[arg-type]


class PrefixStage(EpisodeInputs, Stage):
    name = STAGE
    records = CHECKS
    key_fields = ("id",)
    reads = ("profiling", "taxonomy")
    derived = (SAMPLED, PREFIXES, TRAIN, HELDOUT)

    def __init__(self, params: Params, run_dir, sandbox=None, tasks=None):
        super().__init__(params, run_dir)
        self._sandbox, self._tasks = sandbox, tasks
        self._trajectories: dict[tuple[str, int], Trajectory] | None = None

    # --- inputs -----------------------------------------------------------------------------------

    def taxonomy_version(self) -> int:
        store = taxonomy_store(self.run)
        v = self.params.prefixes.taxonomy_version or store.latest()
        if v is None:
            raise FileNotFoundError(f"{store.versions_dir}: no taxonomy version (run the taxonomy stage first)")
        return v

    def fingerprint(self) -> dict[str, Any]:
        p = self.params.prefixes
        return {"prefixes": {"per_misbehavior": p.per_misbehavior, "heldout": p.heldout_per_misbehavior,
                             "seed": p.seed, "taxonomy_version": self.taxonomy_version(), "snapshot": p.snapshot,
                             **({"verify": True} if p.verify else {})},
                "sandbox": {"backend": self.params.sandbox.backend}, "agent": {"timeout": self.params.agent.command_timeout_s}}

    def sampled(self) -> list[Prefix]:
        path = self.out / SAMPLED
        if path.exists():
            return [Prefix.from_dict(r) for r in read_jsonl(path)[0]]
        store = taxonomy_store(self.run)
        v = self.taxonomy_version()
        taxonomy, labels = store.load(v), store.load_labels(v)
        p = self.params.prefixes
        prefixes = sample_prefixes([t.name for t in taxonomy.kept()], labels, load_error_steps(self.run),
                                   p.per_misbehavior, p.heldout_per_misbehavior, p.seed,
                                   start=prefix_start(self.trajectories()))
        atomic_write_jsonl(path, [x.to_dict() for x in prefixes])
        return prefixes

    def planned(self, records: list[dict[str, Any]] | None = None) -> list[Prefix]:
        """The training sample and, per misbehavior, the held-out waves the recorded checks call for."""
        checked = {r["id"]: Prefix.from_dict(r) for r in (self.load_records() if records is None else records)}
        sampled = self.sampled()
        out = [x for x in sampled if x.split == "train"]
        p = self.params.prefixes
        for m in dict.fromkeys(x.misbehavior for x in sampled if x.split == "heldout"):
            queue = [x for x in sampled if x.split == "heldout" and x.misbehavior == m]
            out += heldout_waves(queue, checked, p.heldout_per_misbehavior, p.keep)
        return out

    def plan(self) -> list[Item]:
        self.trajectories()  # a bad trajectory file fails here, once, not as every check's recorded error
        return [Item((x.id,), x.to_dict()) for x in self.planned()]

    # --- one check ----------------------------------------------------------------------------------

    def redo(self, record: dict[str, Any]) -> bool:
        return bool(record.get("error"))  # a check that could not run (a sandbox that did not start): again

    def replay_hint(self) -> str:
        return "fix what fails and run the stage again: the failed checks run again"

    def run_item(self, payload: dict[str, Any]) -> dict[str, Any]:
        prefix = Prefix.from_dict(payload)
        try:
            self.check(prefix)
        except Exception as e:  # noqa: BLE001 - a check that could not run is recorded, not kept
            prefix.error = f"{type(e).__name__}: {e}"
            prefix.verdict = {m: False for m in MODES}
        return prefix.to_dict()

    def check(self, prefix: Prefix) -> None:
        traj = self.trajectories().get((prefix.env, prefix.seed))
        if traj is None:
            raise LookupError(f"no trajectory {prefix.env} seed {prefix.seed} in the profiling output")
        task = self.tasks()[prefix.env]
        steps = traj.steps[: prefix.steps]
        timeout = self.params.agent.command_timeout_s
        t0 = time.perf_counter()
        with self.sandbox().start(task) as session:
            _, report = restore_prefix(session, steps, timeout=timeout)
            rerun_s = time.perf_counter() - t0
            prefix.verdict = {"exact": report.exact, "normalized": report.normalized, "snapshot": None}
            prefix.masks = sorted({m for s in report.steps for m in s.get("masks", [])})
            first = next((i for i, s in enumerate(report.steps) if not s["exact"]), None)
            if first is not None:
                s = report.steps[first]
                prefix.divergence = {"step": first, "kind": s.get("kind", "output"), "diff": s.get("diff", ""),
                                     "normalized_ok": s["normalized"]}
            prefix.restore = {"rerun_s": round(rerun_s, 4), "commands": sum(s.command is not None for s in steps)}
            if self.params.prefixes.snapshot and report.normalized:
                nxt = traj.steps[prefix.steps] if prefix.steps < len(traj.steps) else None
                after = nxt if nxt is not None and nxt.command is not None and not nxt.timed_out else None
                self.snapshot(prefix, session, task, steps, after)
            if self.params.prefixes.verify and report.normalized:  # after the snapshot: the tests may write files
                self.verify(prefix, session)

    def verify(self, prefix: Prefix, session) -> None:
        """Whether the task's tests pass at the prefix's state (a failure to run them is recorded, not kept)."""
        try:
            result = session.verify()
        except Exception as e:  # noqa: BLE001 - the rerun verdicts stand; only the tests could not run
            prefix.restore["verify_error"] = f"{type(e).__name__}: {e}"
            return
        prefix.restore["verify_s"] = round(result.duration_s, 4)
        if result.error:  # no reward to read (tests not run, timed out, no reward file): not a failing test
            prefix.restore["verify_error"] = result.error
            return
        prefix.passes = result.reward >= 1.0

    def snapshot(self, prefix: Prefix, session, task, steps, after) -> None:
        """Save the state, restore it in a fresh sandbox, and check it there.

        The check runs the step that came after the prefix (`after`, the trajectory's step at the
        error: the correction or the step that ran) and compares its output with the recorded one.
        Without such a step, a listing of the files (paths, modes, sizes, contents) is compared
        between the original and the restored session. Re-running the prefix's own last command
        would not do: `echo x >> f` is not idempotent. A failed snapshot is dropped, not kept."""
        save = getattr(session, "snapshot", None)
        if save is None:
            prefix.restore["snapshot"] = f"the {self.sandbox().name} backend cannot snapshot"
            return
        commands = [s.command for s in steps if s.command is not None]
        if starts_processes(commands):
            prefix.verdict["snapshot"] = False
            prefix.restore["snapshot"] = "the prefix starts processes, which a snapshot cannot hold: rerun it"
            return
        from mirl.agent.restore import normalize_output

        timeout = self.params.agent.command_timeout_s
        handle = None
        try:
            reference = None if after is not None else session.run(STATE_DIGEST, timeout=timeout).output
            handle = save()
            t0 = time.perf_counter()
            with self.sandbox().start(task, snapshot=handle) as restored:
                restore_s = time.perf_counter() - t0
                if after is not None:
                    r = restored.run(after.command, timeout=timeout)
                    ok = r.exit_code == after.exit_code and (
                        normalize_output(r.output, after.command) == normalize_output(after.output, after.command))
                else:
                    ok = restored.run(STATE_DIGEST, timeout=timeout).output == reference
        except Exception as e:  # noqa: BLE001 - the rerun verdicts stand; only the snapshot failed
            prefix.verdict["snapshot"] = False
            prefix.restore["snapshot_error"] = f"{type(e).__name__}: {e}"
            ok = False
            restore_s = None
        prefix.verdict["snapshot"] = ok
        if not ok and "snapshot_error" not in prefix.restore:
            prefix.restore["snapshot_error"] = f"the restored state did not reproduce ({'next step' if after else 'file listing'})"
        if ok:
            prefix.restore.update(snapshot=handle, snapshot_backend=self.sandbox().name, restore_s=round(restore_s, 4),
                                  probe="next step" if after is not None else "file listing")
        elif handle is not None:
            try:
                self.sandbox().drop_snapshot(handle)
            except Exception as e:  # noqa: BLE001
                log.warning("could not drop snapshot %s: %s", handle, e)

    # --- finalize -----------------------------------------------------------------------------------

    def progress(self, record: dict[str, Any]) -> dict[str, Any]:
        v = record.get("verdict") or {}
        return {"last": "exact" if v.get("exact") else "normalized" if v.get("normalized") else "diverged"}

    def finalize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        checked = {r["id"]: Prefix.from_dict(r) for r in records}
        prefixes = [checked.get(x.id, x) for x in self.planned(records)]
        atomic_write_jsonl(self.out / PREFIXES, [x.to_dict() for x in prefixes])
        keep = self.params.prefixes.keep
        atomic_write_jsonl(self.out / TRAIN, [x.to_dict() for x in prefixes if x.split == "train" and x.kept(keep)])
        atomic_write_jsonl(self.out / HELDOUT, [x.to_dict() for x in prefixes if x.split == "heldout" and x.kept(keep)])
        out = funnel(prefixes, keep)
        out["heldout_status"] = heldout_status(self.sampled(), checked, self.params.prefixes.heldout_per_misbehavior, keep)
        if self.params.prefixes.verify:
            out["passing"] = passing(prefixes, keep)
        return out


def passing(prefixes: list[Prefix], keep: str) -> dict[str, dict[str, dict[str, int]]]:
    """Per split and misbehavior, of the kept prefixes whose tests ran (`prefixes.verify`), how many pass at
    the prefix's state: the starts where r_o does not depend on what the policy does next unless it breaks it."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for x in prefixes:
        if x.kept(keep) and x.passes is not None:
            n = out.setdefault(x.split, {}).setdefault(x.misbehavior, {"passing": 0, "verified": 0})
            n["verified"] += 1
            n["passing"] += bool(x.passes)
    return out


def funnel(prefixes: list[Prefix], keep: str) -> dict[str, Any]:
    """Sampled -> kept per mode, overall and per misbehavior (the paper's 640 -> 219)."""
    def counts(xs: list[Prefix]) -> dict[str, Any]:
        out: dict[str, Any] = {"sampled": len(xs), "environments": len({x.env for x in xs})}
        for m in MODES:
            out[m] = sum(x.kept(m) for x in xs)
        out["errors"] = sum(x.error is not None for x in xs)
        return out

    by_m: dict[str, list[Prefix]] = defaultdict(list)
    for x in prefixes:
        by_m[x.misbehavior].append(x)
    train = [x for x in prefixes if x.split == "train"]
    return {"keep": keep, "all": counts(prefixes), "train": counts(train),
            "heldout": counts([x for x in prefixes if x.split == "heldout"]),
            "per_misbehavior": {m: counts(xs) for m, xs in sorted(by_m.items())},
            "train_kept": sum(x.kept(keep) for x in train)}


def heldout_status(sampled: list[Prefix], checked: dict[str, Prefix], want: int, keep: str) -> dict[str, Any]:
    """Per misbehavior: held-out candidates there were, how many were checked and kept, and whether the
    target was reached (`kept N`) or the candidates ran out first (`exhausted`)."""
    out: dict[str, Any] = {}
    for m in dict.fromkeys(x.misbehavior for x in sampled if x.split == "heldout"):
        queue = [x for x in sampled if x.split == "heldout" and x.misbehavior == m]
        done = [checked[x.id] for x in queue if x.id in checked]
        kept = sum(x.kept(keep) for x in done)
        status = f"kept {want}" if kept >= want else ("exhausted" if len(done) == len(queue) else "checking")
        out[m] = {"candidates": len(queue), "checked": len(done), "kept": kept, "wanted": want, "status": status}
    return out


def run_prefixes(params: Params, run_dir: str | Path, sandbox=None, tasks=None, force: bool = False,
                 progress: bool = True) -> dict[str, Any]:
    """Check the training sample and the held-out candidates, wave after wave, until every misbehavior
    has its held-out prefixes kept or its candidates used up (or a stop: budget, lost checks)."""
    stage = PrefixStage(params, run_dir, sandbox=sandbox, tasks=tasks)
    summary = run_stage(stage, force=force, progress=progress)
    while summary["complete"] and len(stage.planned()) > summary["planned"]:
        summary = run_stage(stage, progress=progress)
    return summary
