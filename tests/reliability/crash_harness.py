"""Kill a stage with SIGKILL at seeded random points, restart it, and compare with a straight run.

    ref = reference_pipeline(root, server)              # every stage run once, uninterrupted
    result = crash_stage("taxonomy", ref, root / "t", server, kills=2, rng=random.Random(0))

The reference runs each stage in this process, keeping a copy of the run directory as it stood
before each stage. A crash run copies that snapshot, starts the stage as a subprocess
(`tests.reliability.crash_driver`), kills it once a seeded number of new records is on disk plus a
seeded extra wait (so kills land before the first record, between records and mid-write), and
starts it again, `kills` times; then lets it finish. `compare` then counts records lost, duplicated
and unreadable, and ledger rows billed more than once, against the reference and the server.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.reliability import crash_driver

REPO = Path(__file__).resolve().parents[2]
STAGE_FILES = {  # the records file of each stage (one record per finished item) and its key fields
    "profiling": ("trajectories.jsonl", ("task", "seed")),
    "taxonomy": ("label_batches.jsonl", ("batch",)),
    "prefixes": ("checks.jsonl", ("id",)),
    "misbehavior_rate": ("continuations.jsonl", ("policy", "prefix_id", "sample")),
    "pass_at_k": ("episodes.jsonl", ("policy", "task", "run")),
}
# fields that differ between two identical runs (clocks; and every `*_s` field), dropped before comparing
# cost: a cache hit is free; verifier_tail: the tests' own report of how long they took
VOLATILE = {"time", "seconds", "started", "finished", "created", "cost_usd", "verifier_tail"}
SKIP_FILES = {"summary.json", "progress.json", "params.json"}  # compared field by field, not as bytes


@dataclass
class Reference:
    root: Path
    url: str
    snapshots: dict[str, Path] = field(default_factory=dict)  # stage -> run dir as it stood before it
    final: Path | None = None


@dataclass
class CrashResult:
    stage: str
    kills: int = 0  # SIGKILLs delivered while the stage was running
    finished_early: int = 0  # planned kills that found the stage already done
    survived: bool = False  # the last restart completed and the outputs equal the reference's
    lost: int = 0
    duplicated: int = 0
    torn: int = 0  # unreadable lines left in the final records file
    ledger_double: int = 0  # paid ledger rows beyond the replies the server sent
    ledger_unbilled: int = 0  # replies sent to a process killed before it could record them
    ledger_torn: int = 0
    differences: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def kill(self, proc: subprocess.Popen, group: bool = True) -> None:
        """SIGKILL `proc` (its process group when `group`) if it still runs, and count the kill."""
        if proc.poll() is None:
            (os.killpg if group else os.kill)(proc.pid, signal.SIGKILL)
            self.kills += 1
        else:
            self.finished_early += 1

    def bill(self, paid: list, served: list) -> None:
        """Compare the paid ledger rows with the replies the server sent for this run."""
        self.ledger_double = max(0, len(paid) - len(served))
        self.ledger_unbilled = max(0, len(served) - len(paid))

    def finish(self, final: subprocess.CompletedProcess, t0: float) -> CrashResult:
        """Survived: the last restart completed, its outputs equal the reference's, no record or row went wrong."""
        self.survived = final.returncode == 0 and not self.differences and not (
            self.lost or self.duplicated or self.torn or self.ledger_double or self.ledger_torn)
        self.seconds = round(time.monotonic() - t0, 1)
        return self


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault(crash_driver.KEY_ENV, "sk-crash-test-key-0000")
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    env.pop("MIRL_PROGRESS", None)
    return env


def reference_pipeline(root: Path, url: str, stages=crash_driver.STAGES) -> Reference:
    """Every stage once, straight through, in this process; snapshots of the run before each."""
    os.environ.setdefault(crash_driver.KEY_ENV, "sk-crash-test-key-0000")
    ref = Reference(root=root, url=url)
    run = root / "reference"
    run.mkdir(parents=True, exist_ok=True)
    for stage in stages:
        snap = root / "before" / stage
        shutil.copytree(run, snap)
        ref.snapshots[stage] = snap
        summary = crash_driver.run(stage, str(run), url, delay=0.0)
        assert summary.get("complete", True), (stage, summary)
    ref.final = run
    return ref


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def crash_stage(stage: str, ref: Reference, work: Path, served: list, kills: int, rng: random.Random,
                delay: float = 0.05, timeout_s: float = 300.0) -> CrashResult:
    """Kill `stage` `kills` times at seeded random points, restart it until it completes, compare."""
    t0 = time.monotonic()
    result = CrashResult(stage)
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(ref.snapshots[stage], work)
    records = work / stage / STAGE_FILES[stage][0]
    planned = _lines(ref.final / stage / STAGE_FILES[stage][0])
    served_before = len(served)
    cmd = [sys.executable, "-m", "tests.reliability.crash_driver", stage, str(work), ref.url, "--delay", str(delay)]
    env = child_env()
    for _ in range(kills):
        have = _lines(records)
        target = have + rng.randint(0, max(0, planned - have - 1))
        extra = rng.uniform(0.0, 4 * delay)
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and _lines(records) < target and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(extra)
        result.kill(proc)
        proc.wait(30)
    final = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
    if final.returncode != 0:
        result.differences.append(f"the last restart failed ({final.returncode}):\n{final.stderr[-3000:]}")
    compare(stage, ref.final, work, served[served_before:], result)
    return result.finish(final, t0)


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE and not k.endswith("_s")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _jsonl(path: Path) -> tuple[list[dict], int]:
    rows, torn = [], 0
    for raw in path.read_bytes().splitlines(keepends=True) if path.exists() else []:
        try:
            rows.append(json.loads(raw))
            if not raw.endswith(b"\n"):
                torn += 1
        except ValueError:
            torn += 1
    return rows, torn


def _where(a: Any, b: Any, path: str = "") -> str:
    """The dotted path of the first difference between two records, with both values (shortened)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if a.get(k) != b.get(k):
                return _where(a.get(k), b.get(k), f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _where(x, y, f"{path}[{i}]")
    return f"{path}: {str(a)[:80]!r} vs {str(b)[:80]!r}"


def _canon(rows: list[dict]) -> list[str]:
    return sorted(json.dumps(_strip(r), sort_keys=True) for r in rows)


def compare(stage: str, ref_run: Path, run: Path, served: list, result: CrashResult) -> None:
    name, keys = STAGE_FILES[stage]
    want, _ = _jsonl(ref_run / stage / name)
    got, result.torn = _jsonl(run / stage / name)
    key = lambda r: tuple(r.get(k) for k in keys)  # noqa: E731
    want_keys, got_keys = [key(r) for r in want], [key(r) for r in got]
    result.lost = len(set(want_keys) - set(got_keys))
    result.duplicated = len(got_keys) - len(set(got_keys))
    if _canon(got) != _canon(want):
        result.differences.append(f"{stage}/{name}: records differ from the straight run's")
    for path in sorted((ref_run / stage).rglob("*")):
        rel = path.relative_to(ref_run)
        other = run / rel
        if path.is_dir() or path.name in SKIP_FILES or path.name == name:
            continue
        if not other.exists():
            result.differences.append(f"{rel}: missing")
        elif path.suffix == ".jsonl":
            if _canon(_jsonl(other)[0]) != _canon(_jsonl(path)[0]):
                result.differences.append(f"{rel}: records differ")
        elif path.read_bytes() != other.read_bytes():
            result.differences.append(f"{rel}: differs")
    for path in sorted((run / stage).rglob("*")):
        if path.is_file() and not (ref_run / path.relative_to(run)).exists():
            result.differences.append(f"{path.relative_to(run)}: left over (not in the straight run)")
    want_sum = json.loads((ref_run / stage / "summary.json").read_text())
    got_sum = json.loads((run / stage / "summary.json").read_text())
    for k in ("planned", "done", "complete", "lost"):
        if want_sum.get(k) != got_sum.get(k):
            result.differences.append(f"summary {k}: {got_sum.get(k)!r}, straight run {want_sum.get(k)!r}")
    rows, result.ledger_torn = _jsonl(run / "llm_calls.jsonl")
    before, _ = _jsonl(ref_run.parent / "before" / stage / "llm_calls.jsonl")
    paid = [r for r in rows[len(before):] if not r.get("cache_hit") and r.get("cost_usd")]
    result.bill(paid, served)


def table(results: list[CrashResult]) -> str:
    head = ("stage", "kills", "survived", "records lost", "duplicated", "torn", "ledger double counts",
            "unbilled in flight", "seconds")
    rows = [head] + [(r.stage, str(r.kills), "yes" if r.survived else "NO", str(r.lost), str(r.duplicated),
                      str(r.torn), str(r.ledger_double), str(r.ledger_unbilled), f"{r.seconds:.0f}") for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows)


def crash_training(ref: Reference, work: Path, served: list, kills: int, rng: random.Random,
                   timeout_s: float = 1800.0, steps: int = 3) -> CrashResult:
    """Kill training `kills` times, each a seeded time after a seeded number of checkpoints, restart it
    until it completes; each restart must resume from the last checkpoint, and the final optimizer
    state must count every update (the learner's steps and AdamW's per-parameter step)."""
    import torch

    t0 = time.monotonic()
    result = CrashResult("training")
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(ref.final, work)
    ckpts = work / "training" / "checkpoints"
    cmd = [sys.executable, "-m", "tests.reliability.crash_driver", "training", str(work), ref.url, "--steps", str(steps)]
    served_before = len(served)

    def saved() -> list[int]:
        return sorted(int(p.name[5:]) for p in ckpts.glob("step-*") if (p / "state.json").exists())

    for _ in range(kills):
        have = len(saved())
        if have >= steps:
            break
        target = have + rng.randint(0, steps - have - 1)
        proc = subprocess.Popen(cmd, cwd=REPO, env=child_env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and len(saved()) < target and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 3.0))
        result.kill(proc)
        err = proc.communicate(timeout=60)[1]
        resumed = re.findall(r"resuming after step (\d+)", err)  # none when killed before it got there
        if resumed and int(resumed[0]) != have:
            result.differences.append(f"a restart with checkpoint {have} resumed after step {resumed[0]}")
    have = saved()[-1] if saved() else 0
    final = subprocess.run(cmd, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=timeout_s)
    if final.returncode != 0:
        result.differences.append(f"the last restart failed ({final.returncode}):\n{final.stderr[-3000:]}")
    elif have and f"resuming after step {have}" not in final.stderr:
        result.differences.append(f"the last restart did not resume from checkpoint {have}")
    metrics, result.torn = _jsonl(work / "training" / "metrics.jsonl")
    got = [int(m["step"]) for m in metrics]
    result.lost = len(set(range(1, steps + 1)) - set(got))
    result.duplicated = len(got) - len(set(got))
    rollouts, torn = _jsonl(work / "training" / "rollouts.jsonl")
    result.torn += torn
    keys = [(r["step"], r["draw"], r["sample"]) for r in rollouts]
    result.duplicated += len(keys) - len(set(keys))
    if final.returncode == 0:
        last = torch.load(ckpts / f"step-{steps:06d}" / "optimizer.pt", map_location="cpu", weights_only=False)
        trained = sum(1 for m in metrics if not m.get("skipped"))
        adam = {int(float(s["step"])) for s in last["optimizer"]["state"].values()}
        if last["steps"] != trained or (trained and adam != {trained}):
            result.differences.append(f"optimizer state counts {last['steps']} steps (AdamW {adam}), "
                                      f"{trained} updates were made")
    rows, result.ledger_torn = _jsonl(work / "llm_calls.jsonl")
    before, _ = _jsonl(ref.final / "llm_calls.jsonl")
    paid = [r for r in rows[len(before):] if not r.get("cache_hit") and r.get("cost_usd")]
    result.bill(paid, served[served_before:])
    return result.finish(final, t0)


def batch_params(root: Path, url: str) -> Path:
    """A params file for `mirl batch --to 02`: every LLM role at `url`, bubblewrap, three tasks, two seeds."""
    import yaml

    role = {"api_base": url, "api_key_env": crash_driver.KEY_ENV, "max_tokens": 64}
    params = {"models": {r: {"model": f"openai/crash-{r}", **role} for r in ("policy", "localizer", "annotator")}
              | {"backoff_s": 0.01, "prices": {f"openai/crash-{r}": crash_driver.PRICE
                                               for r in ("policy", "localizer", "annotator")}},
              "sandbox": {"backend": "bwrap"}, "agent": {"max_steps": 4},
              "profiling": {"tasks": ",".join(str(REPO / "tasks" / t) for t in crash_driver.TASKS), "seeds": 2,
                            "workers": 2, "localizer": "llm"},
              "taxonomy": {"annotator": "llm", "label_batch_size": 2, "workers": 2}}
    path = root / "batch.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def crash_batch(root: Path, url: str, served: list, kills: int, rng: random.Random, jupyter_path: str,
                timeout_s: float = 900.0) -> CrashResult:
    """`mirl batch --to 02` straight, then again SIGKILLed (the batch process alone, as `kill -9 PID`
    does: its kernel notices on its own) at seeded points within the work left (the straight run's length
    times the share of its records not yet written) and restarted at once; the records of both stages
    must equal the straight run's."""
    t0 = time.monotonic()
    result = CrashResult("batch")
    params = batch_params(root, url)
    env = child_env() | {"JUPYTER_PATH": jupyter_path}

    def cmd(name: str) -> list[str]:
        return [sys.executable, "-m", "mirl", "batch", "--params", str(params), "--name", name, "--to", "02",
                "--notebooks", str(REPO / "notebooks")]

    s0 = time.monotonic()
    straight = subprocess.run(cmd("straight"), cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s)
    length = time.monotonic() - s0
    if straight.returncode != 0:
        result.differences.append(f"the straight batch failed:\n{straight.stdout[-3000:]}")
        return result
    served_before = len(served)

    def records(run: str) -> int:
        return sum(_lines(root / "runs" / run / stage / STAGE_FILES[stage][0]) for stage in ("profiling", "taxonomy"))

    planned = max(1, records("straight"))
    for _ in range(kills):
        # a seeded point within the work still left (each restart has less), never under the start-up's share
        left = max(0.15, 1 - records("crashed") / planned) * length
        proc = subprocess.Popen(cmd("crashed"), cwd=root, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.1, 0.8) * left)
        result.kill(proc, group=False)  # the batch process alone, as `kill -9 PID` does
        proc.wait(30)
    final = subprocess.run(cmd("crashed"), cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s)
    if final.returncode != 0:
        result.differences.append(f"the last restart failed ({final.returncode}):\n{final.stdout[-3000:]}")
    want_run, got_run = root / "runs" / "straight", root / "runs" / "crashed"
    for stage in ("profiling", "taxonomy"):
        name, keys = STAGE_FILES[stage]
        want, _ = _jsonl(want_run / stage / name)
        got, torn = _jsonl(got_run / stage / name)
        result.torn += torn
        got_keys = [tuple(r.get(k) for k in keys) for r in got]
        result.lost += len({tuple(r.get(k) for k in keys) for r in want} - set(got_keys))
        result.duplicated += len(got_keys) - len(set(got_keys))
        if _canon(got) != _canon(want):
            by_key = {tuple(r.get(k) for k in keys): _strip(r) for r in got}
            where = next((_where(_strip(w), by_key.get(tuple(w.get(k) for k in keys))) for w in want
                          if _strip(w) != by_key.get(tuple(w.get(k) for k in keys))), "")
            result.differences.append(f"{stage}/{name}: records differ from the straight batch's (first at {where})")
    rows, result.ledger_torn = _jsonl(got_run / "llm_calls.jsonl")
    paid = [r for r in rows if not r.get("cache_hit") and r.get("cost_usd")]
    result.bill(paid, served[served_before:])
    return result.finish(final, t0)
