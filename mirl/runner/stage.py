"""The common stage runner: what every stage would otherwise rewrite, written once.

A stage declares what it is and how its work splits; the runner does the rest:

    class MyStage(Stage):
        name = "taxonomy"                        # params section and directory runs/<run>/taxonomy
        records = "labels.jsonl"                 # one record per finished item: the resume point
        key_fields = ("error_id",)               # the fields of a record that make its item key
        reads = ("profiling",)                   # earlier stages whose outputs it needs

        def fingerprint(self): ...               # the params its results depend on (nested dict)
        def plan(self): ...                      # -> [Item(key, payload), ...]
        def run_item(self, payload): ...         # -> the item's record (a dict with key_fields)
        def finalize(self, records): ...         # derived files; -> extra summary fields

    summary = run_stage(MyStage(params, "runs/demo"))

The runner owns: the run directory layout (`mirl.runner.layout`), the params fingerprint check
(`mirl.runner.fingerprint`), resume by item key (finished items are skipped, records a stage asks
to redo are removed first, an item is never written twice, a torn last line from a kill is cut),
local threads or Ray through one loop that keeps `workers` items in flight, the progress bar with
the stage's own fields (or, under `mirl batch`, `progress.json`: `mirl.runner.progress`), the stage budget (no new item once the stage's LLM spend reaches it; an item
stopped by it stays unfinished for the next run), atomic rewrites, and `summary.json` with the
ledger summary of the stage's LLM calls.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any, ClassVar

from mirl.jsonl import JsonlWriter, read_jsonl
from mirl.llm.errors import BudgetExceeded
from mirl.runner.executor import make_executor
from mirl.runner.fingerprint import check_or_store, stored_digest
from mirl.runner.layout import RunDir, atomic_write_json, atomic_write_jsonl
from mirl.runner.progress import PROGRESS, Progress
from mirl.typed import check_ranges

log = logging.getLogger(__name__)


class StageError(RuntimeError):
    """A stage that cannot run as asked (missing inputs, bad plan); the message says what to do."""


class StopStage(Exception):
    """Raised by `run_item` to stop the whole stage cleanly (e.g. a budget); the item stays unfinished."""


@dataclass
class Item:
    key: tuple
    payload: Any


class Stage:
    """Base class of every stage; see the module docstring for what a stage declares."""

    name: ClassVar[str] = ""
    directory: ClassVar[str | None] = None  # None: the stage's name; "": the run directory itself
    records: ClassVar[str] = "records.jsonl"
    key_fields: ClassVar[tuple[str, ...]] = ()
    reads: ClassVar[tuple[str, ...]] = ()
    derived: ClassVar[tuple[str, ...]] = ()  # files `finalize` writes (removed with --force)

    def __init__(self, params: Any, run_dir: Any):
        if dataclasses.is_dataclass(params) and not isinstance(params, type):
            check_ranges(params)  # loaded params were checked as they were read; params made in code are here
        self.params = params
        self.run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)

    # --- what a stage declares ---------------------------------------------------------------

    def fingerprint(self) -> dict[str, Any]:
        raise NotImplementedError

    def plan(self) -> list[Item]:
        raise NotImplementedError

    def run_item(self, payload: Any) -> dict[str, Any]:
        raise NotImplementedError

    def warm_up(self) -> None:
        """Runs once in the runner's thread before items run side by side: what every item would
        otherwise make for itself at its start, under a lock, while dozens of items wait (e.g. an import
        that takes seconds while the threads beside it compete for the GIL)."""

    def redo(self, record: dict[str, Any]) -> bool:
        """True for a stored record whose item should run again (e.g. an infrastructure error)."""
        return False

    def replay_hint(self) -> str:
        """How to play errored items again, said when every item failed ("": a new run replays them)."""
        return ""

    def progress(self, record: dict[str, Any]) -> dict[str, Any]:
        """Fields for the progress bar after `record` was written."""
        return {}

    def finalize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """Write derived outputs from all records; return extra summary fields."""
        return {}

    def cleared(self) -> list[str]:
        """The files (and directories) of the stage that `--force` removes."""
        return [self.records, *self.derived]

    def has_outputs(self) -> bool:
        """Whether the stage stored results that a change of params would mix with (refused then)."""
        return self.records_path.exists() or self.run.summary(self.dir_name).exists()

    # --- settings the runner reads from the stage's params section, when it has them ----------

    @property
    def section(self) -> Any:
        return getattr(self.params, self.name, None) if self.name else None

    @property
    def workers(self) -> int:
        return int(getattr(self.section, "workers", 1))  # a section's workers is at least 1 (its range)

    @property
    def ray_address(self) -> str:
        return str(getattr(self.section, "ray_address", "") or "")

    @property
    def budget_usd(self) -> float:
        return float(getattr(self.section, "budget_usd", 0.0) or 0.0)

    # --- paths -------------------------------------------------------------------------------

    @property
    def dir_name(self) -> str:
        return self.name if self.directory is None else self.directory

    @property
    def out(self):
        return self.run.stage_dir(self.dir_name)

    @property
    def records_path(self):
        return self.out / self.records

    def key(self, record: dict[str, Any]) -> tuple:
        return tuple(record.get(f) for f in self.key_fields)

    def load_records(self) -> list[dict[str, Any]]:
        records, _ = read_jsonl(self.records_path)
        return records


def _read_for_resume(stage: Stage) -> list[dict[str, Any]]:
    """The stored records, after removing those the stage wants redone and any duplicate keys."""
    records, report = read_jsonl(stage.records_path)
    if report.torn_tail:
        log.warning("%s: the last record was cut off by a kill; its item runs again", stage.records_path)
    keep, seen = [], set()
    for r in records:
        k = stage.key(r)
        if k in seen or stage.redo(r):
            continue
        seen.add(k)
        keep.append(r)
    if len(keep) != len(records):
        log.info("%s: %d record(s) will be redone", stage.records_path, len(records) - len(keep))
        atomic_write_jsonl(stage.records_path, keep)
    return keep


def check_inputs(stage: Stage) -> dict[str, str | None]:
    """The digests of the stages this one reads; an error naming the stage that has not run yet."""
    digests = {}
    for name in stage.reads:
        summary = stage.run.read_summary(name)
        if summary is None:
            raise StageError(f"stage {stage.name!r} reads the outputs of {name!r}, which has not run in "
                             f"{stage.run.root} (run it first, e.g. `mirl batch --to {name}`)")
        digests[name] = stored_digest(stage.run.params(name))
    return digests


STAGE_LOCK = ".stage.lock"


@contextlib.contextmanager
def stage_lock(stage: Stage, wait_s: float = 60.0):
    """One process at a time per stage directory. A killed `mirl batch` can leave its kernel running
    for a moment (until it sees its parent gone); a restart waits for it rather than writing beside it."""
    stage.run.root.mkdir(parents=True, exist_ok=True)
    path = stage.run.root / f".{stage.dir_name or 'run'}{STAGE_LOCK}"
    with open(path, "a+") as f:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StageError(f"another process is running stage {stage.name!r} of {stage.run.root} "
                                     f"(still there after {wait_s:.0f} s; stop it, or use another run name)") from None
                time.sleep(0.2)
        yield


def run_stage(stage: Stage, force: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run every unfinished item of `stage`, then finalize it; returns (and stores) its summary."""
    return run_own_loop(stage, lambda digest, items: _run_items(stage, items, progress), force=force,
                        prepare=lambda: _plan(stage))


def run_own_loop(stage: Stage, work: Callable[[str, Any], dict[str, Any]], force: bool = False,
                 prepare: Callable[[], Any] | None = None) -> dict[str, Any]:
    """The runner's prologue and epilogue around a stage's own loop: the hook for a stage whose work is
    not independent keyed items (training: each step starts from the weights the last one left).

    Prologue, under the stage lock: `--force` clears the stage's files (`Stage.cleared`), the params
    fingerprint and the digests of the stages it reads are checked against the stored ones, then
    `prepare()` reads the inputs (a failure there stores no params and no results), then the
    fingerprint is stored. `work(digest, prepared)` runs the stage and returns its summary fields.
    Epilogue: stage, run, digest, elapsed time and the stage's LLM ledger are added, and the summary
    is written atomically to `summary.json`."""
    with stage_lock(stage):
        t0 = time.time()
        run = stage.run
        if force:
            run.clear_stage(stage.dir_name, stage.cleared())
        stage.out.mkdir(parents=True, exist_ok=True)
        fingerprint = dict(stage.fingerprint())
        inputs = check_inputs(stage)
        if inputs:
            fingerprint["inputs"] = inputs
        where = dict(run=run.name, stage=stage.name or "rollout", has_outputs=stage.has_outputs(),
                     params=_params_dict(stage.params))
        check_or_store(run.params(stage.dir_name), fingerprint, store=False, **where)
        prepared = prepare() if prepare is not None else None
        digest = check_or_store(run.params(stage.dir_name), fingerprint, **where)
        summary: dict[str, Any] = {"stage": stage.name, "run": run.name, "digest": digest}
        summary.update(work(digest, prepared))
        summary["elapsed_s"] = round(time.time() - t0, 3)
        summary["llm"] = ledger_summary(run, stage.name)
        atomic_write_json(run.summary(stage.dir_name), summary)
        return summary


def _plan(stage: Stage) -> list[Item]:
    items = stage.plan()
    keys = [i.key for i in items]
    if len(set(keys)) != len(keys):
        raise StageError(f"stage {stage.name!r} planned the same item key twice")
    return items


def _run_items(stage: Stage, items: list[Item], progress: bool) -> dict[str, Any]:
    keys = [i.key for i in items]
    done = _read_for_resume(stage)
    done_keys = {stage.key(r) for r in done}
    pending = [i for i in items if i.key not in done_keys]
    stopped, lost, new = _loop(stage, pending, progress)
    # records to redo stay visible until the next run replays them; in plan order, so derived outputs
    # do not depend on the order items finished in (workers, kills and resumes change that order)
    order = {k: i for i, k in enumerate(keys)}
    records = sorted(stage.load_records(), key=lambda r: order.get(stage.key(r), len(order)))
    summary: dict[str, Any] = {
        "planned": len(items), "skipped": len(items) - len(pending), "new": new, "lost": lost,
        "done": len({stage.key(r) for r in records} & set(keys)), "stopped": stopped,
    }
    summary["complete"] = summary["done"] == summary["planned"] and not stopped
    ours = [r for r in records if stage.key(r) in order]
    summary["errors"] = sum(map(errored, ours))  # sandbox or model broke (replayed next run)
    why = all_failed(ours)
    if why and stage.replay_hint():
        why = f"{why} ({stage.replay_hint()})"
    if why:  # nothing usable: a broken engine or sandbox, not bad luck
        summary["stopped"] = f"{stopped}; {why}" if stopped else why
        summary["complete"] = False
        log.error("stage %s: %s", stage.name, summary["stopped"])
    summary.update(stage.finalize(records))
    return summary


def errored(record: dict[str, Any]) -> bool:
    """A record of an item that could not run: an episode that ended in an error, or a record without
    an episode's exit (a prefix check) that carries an error."""
    if "exit_reason" in record:
        return record.get("exit_reason") == "error"
    return bool(record.get("error"))


def all_failed(records: list[dict[str, Any]]) -> str:
    """Why a stage's records are unusable, or "": every item failed, or, in a stage that compares
    policies, every item of one policy did (its score would be a broken engine's, not the policy's:
    the H200 run of 2026-12-05 reported a base pass@1 of 0.0 from 16 errored trials of 16)."""
    by: dict[Any, list[dict[str, Any]]] = {}
    for r in records:
        by.setdefault(r.get("policy"), []).append(r)
    whys = []
    for policy, rs in by.items():
        failed = [r for r in rs if errored(r)]
        if rs and len(failed) == len(rs):
            first = Counter(_error_line(r) for r in failed).most_common(1)[0][0]
            who = "every item" if len(by) == 1 else f"every item of policy {policy}"
            whys.append(f"{who} failed ({len(failed)}), most often: {first}")
    return "; ".join(whys)


def _error_line(record: dict[str, Any]) -> str:
    """The first line of an errored record's error, short enough for a summary."""
    text = str(record.get("error") or record.get("why_invalid") or "no error text recorded")
    return text.strip().splitlines()[0][:300] if text.strip() else "no error text recorded"


def _loop(stage: Stage, pending: list[Item], show: bool) -> tuple[str | None, int, int]:
    """Keep `workers` items in flight; write each finished record; stop submitting on a budget stop."""
    if not pending:
        return None, 0, 0
    from mirl.llm.ledger import open_ledger

    ledger = open_ledger(stage.run.root)
    warm = bool(stage.ray_address)  # on Ray each worker process builds its own
    executor = make_executor(stage.workers, stage.ray_address)
    width = executor.width
    queue = list(reversed(pending))
    inflight: dict[Future, Item] = {}
    stopped: str | None = None
    lost = new = 0
    bar = Progress(total=len(pending), disable=not show, desc=stage.name or "items", unit="item",
                   path=stage.out / PROGRESS if show else None)
    try:
        with JsonlWriter(stage.records_path) as writer:
            while queue or inflight:
                while queue and len(inflight) < width and stopped is None:
                    cap = stage.budget_usd
                    if cap > 0 and ledger.spent(stage.name) >= cap:
                        stopped = f"budget: stage {stage.name!r} spent ${ledger.spent(stage.name):.4f} of ${cap:.4f}"
                        break
                    if not warm:  # after the budget's first check: a stage stopped at once builds nothing
                        stage.warm_up()
                        warm = True
                    item = queue.pop()
                    inflight[executor.submit(stage, item.payload)] = item
                if not inflight:
                    break
                finished, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                for fut in finished:
                    item = inflight.pop(fut)
                    try:
                        record = fut.result()
                    except (BudgetExceeded, StopStage) as e:
                        stopped = stopped or f"{type(e).__name__}: {e}"
                        continue
                    except Exception as e:  # noqa: BLE001 - a lost item stays unfinished for the next run
                        lost += 1
                        log.error("%s item %s was lost: %s: %s", stage.name, item.key, type(e).__name__, e)
                        bar.update(1)
                        continue
                    if stage.key(record) != item.key:
                        raise StageError(f"stage {stage.name!r}: item {item.key} returned a record keyed "
                                         f"{stage.key(record)}")
                    writer.append(record)
                    new += 1
                    bar.update(1)
                    bar.set_postfix(stage.progress(record), refresh=False)
    finally:
        bar.close()
        executor.shutdown()
    if stopped:
        log.warning("%s stopped: %s (%d item(s) left for the next run)", stage.name, stopped,
                    len(queue) + len(inflight))
    return stopped, lost, new


def ledger_summary(run: RunDir, stage: str) -> dict[str, dict[str, float]]:
    """Calls, cache hits, errors, tokens (input, cached input, output) and cost per role of one stage."""
    from mirl.llm.ledger import summarize

    if not run.ledger.exists():
        return {}
    df = summarize(run.root, by=("stage", "role"))
    if df.empty:
        return {}
    df = df[df["stage"] == stage]
    cols = ["calls", "cache_hits", "errors", "input_tokens", "cached_input_tokens", "output_tokens", "cost_usd"]
    return {str(r["role"]): {c: float(r[c]) for c in cols} for _, r in df.iterrows()}


def _params_dict(params: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(params) if dataclasses.is_dataclass(params) else {}


def stage_budgets(params: Any) -> dict[str, float]:
    """Each stage's LLM spend cap, keyed by the stage's ledger name: `models.stage_budget_usd`, then every
    section's own `budget_usd` (0 = no cap). The client checks it before each uncached request."""
    import dataclasses

    models = getattr(params, "models", None)
    out = dict(getattr(models, "stage_budget_usd", {}) or {})
    for f in dataclasses.fields(params) if dataclasses.is_dataclass(params) else ():
        cap = float(getattr(getattr(params, f.name), "budget_usd", 0.0) or 0.0)
        if cap > 0:
            out[f.name] = cap
    return out


def keyed(items: Iterable[tuple[tuple, Any]]) -> list[Item]:
    return [Item(k, p) for k, p in items]
