"""`mirl batch`: the pipeline's stage notebooks, in order, headless, resumable.

    mirl batch --params params/demo.yaml --name demo [--from 02] [--to prefixes] [--force]

The pipeline is every `notebooks/NN_*.ipynb` whose metadata names its stage (`metadata.mirl.stage`),
in file-name order. Each runs with papermill on an explicit kernel (`mirl.notebook.kernel_name`),
in the working directory, with a per-cell timeout, reading the earlier stages' outputs from
`runs/<name>/`. All notebooks' parameters are validated before the first kernel starts.

`runs/<name>/batch.json` remembers, per stage, the digest of the notebook's resolved parameters,
the stored digests of the stages before it, and whether the stage completed. A stage is skipped
when that record says complete with the same digests, its `summary.json` says complete, and its
executed notebook is in `reports/<name>/`. So a rerun after a kill (or a fix) starts at the first
unfinished stage, and the stage itself resumes by item key; changed params rerun the stage and every
stage after it (the stage refuses outputs made with other params unless `--force`).

The first failure stops the batch, naming the notebook, the cell and the error (a kernel that died
is reported as such). With `--parallel N`, up to N recipes' trainings run at once (`mirl.batch_jobs`):
those running when one fails run on to their end, and the stages after them do not start. While a stage runs, its kernel has `MIRL_PROGRESS=file`: the runner writes
`runs/<name>/<stage>/progress.json` instead of drawing a bar, and this process redraws one line per
stage from it (in place on a terminal, a line every ~10 s otherwise). The kernel's stdout and stderr
go to `reports/<name>/logs/<stage>.log`, and so do mirl's log records in the kernel
(`MIRL_LOG_FILE`, `mirl.notebook.log_to_file`); each executed notebook is also exported to HTML, and
`reports/<name>/index.html` (`mirl.report_index`) is rewritten after every stage.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from mirl.batch_jobs import Failure, Job, run_at_once, run_job
from mirl.notebook import RESERVED, RunSpec, kernel_name, notebook_meta, redact_secrets, resolve_parameters
from mirl.runner.fingerprint import digest, flatten
from mirl.runner.layout import RunDir, atomic_write_json
from mirl.runner.progress import PROGRESS
from mirl.typed import ParamsError

STATE = "batch.json"
LOCK = ".batch.lock"
NOTEBOOK_NAME = re.compile(r"^(\d\d)_.+\.ipynb$")


class BatchError(RuntimeError):
    """A batch that cannot start as asked (bad stage name, another batch on the run); says what to do."""


@dataclass(frozen=True)
class Notebook:
    number: str  # "01"
    stage: str   # "profiling": the params section and runs/<name>/<stage>
    path: Path

    @property
    def label(self) -> str:
        return f"{self.number} {self.stage}"


def discover(directory: str | Path) -> list[Notebook]:
    """The pipeline: `NN_*.ipynb` under `directory` naming a stage in their metadata, in name order."""
    directory = Path(directory)
    out: list[Notebook] = []
    for path in sorted(directory.glob("[0-9][0-9]_*.ipynb")):
        m = NOTEBOOK_NAME.match(path.name)
        if not m:
            continue
        out.append(Notebook(m.group(1), notebook_meta(path)["stage"], path))
    seen: dict[str, Path] = {}
    for nb in out:
        if nb.stage in seen:
            raise ParamsError(f"{nb.path}: stage {nb.stage!r} is already run by {seen[nb.stage]}")
        seen[nb.stage] = nb.path
    if not out:
        raise ParamsError(f"{directory}: no stage notebooks (NN_name.ipynb with metadata.mirl.stage)")
    return out


def find(notebooks: list[Notebook], which: str) -> int:
    """The index of the stage named `which`: a stage name, or its number (`2` or `02`)."""
    for i, nb in enumerate(notebooks):
        if which == nb.stage or (which.isdigit() and int(which) == int(nb.number)):
            return i
    choices = ", ".join(f"{nb.number} ({nb.stage})" for nb in notebooks)
    raise BatchError(f"no stage {which!r} in the pipeline; stages: {choices}")


@dataclass(frozen=True)
class Unit:
    """One notebook run of the batch: a stage, or one recipe's run of the training stage."""

    nb: Notebook
    recipe: Any = None  # mirl.recipes.Recipe for a recipe's training

    @property
    def key(self) -> str:
        """Its entry in batch.json: the stage, `training:<recipe>` for a recipe."""
        return self.nb.stage if self.recipe is None else f"{self.nb.stage}:{self.recipe.name}"

    @property
    def path(self) -> Path:
        return self.nb.path

    @property
    def label(self) -> str:
        return self.nb.label if self.recipe is None else f"{self.nb.label} [{self.recipe.name}]"

    def run_name(self, run: str) -> str:
        from mirl import recipes

        return run if self.recipe is None else recipes.run_name(run, self.recipe.name)


def units(notebooks: list[Notebook], recipes: list[Any]) -> list[Unit]:
    """The batch's notebook runs in order: the training notebook once per recipe when there are any."""
    return [Unit(nb, r) for nb in notebooks for r in (recipes if nb.stage == "training" and recipes else [None])]


def select_units(every: list[Unit], first: str | None, last: str | None,
                 only: list[str] | None = None) -> list[Unit]:
    """The runs from `first` to `last`: a stage (its name or number: all its recipes' runs), or one
    recipe's run of the training stage as `training:<recipe>` (or `04:<recipe>`); with `only`, the
    training runs of those recipes alone (train one recipe, then evaluate, in one call)."""
    def bounds(which: str) -> tuple[int, int]:
        stage, colon, recipe = which.partition(":")
        nbs = list(dict.fromkeys(u.nb for u in every))
        nb = nbs[find(nbs, stage)]
        if colon:
            names = [u.recipe.name for u in every if u.recipe]
            if not names:
                raise BatchError(f"{which}: this batch has no training recipes (the params name none)")
            if not any(u.nb == nb and u.recipe for u in every):
                raise BatchError(f"{which}: only the training stage runs once per recipe ({', '.join(names)})")
            if recipe not in names:
                raise BatchError(f"{which}: no recipe {recipe!r} in this batch; recipes: {', '.join(names)}")
        hits = [i for i, u in enumerate(every) if u.nb == nb and (not colon or u.recipe.name == recipe)]
        return hits[0], hits[-1]

    lo = bounds(first)[0] if first else 0
    hi = bounds(last)[1] if last else len(every) - 1
    if lo > hi:
        raise BatchError(f"--from {first} comes after --to {last} in the pipeline")
    chosen = every[lo:hi + 1]
    if only:
        names = [u.recipe.name for u in every if u.recipe]
        unknown = [n for n in only if n not in names]
        if unknown:
            raise BatchError(f"--recipes {','.join(only)}: no recipe {', '.join(map(repr, unknown))} in this batch; "
                             f"recipes: {', '.join(names) or 'none (the params name none)'}")
        chosen = [u for u in chosen if u.recipe is None or u.recipe.name in only]
    return chosen


@dataclass
class BatchSpec:
    params_file: Path | None
    run_name: str = "demo"
    overrides: dict[str, Any] = field(default_factory=dict)
    notebooks_dir: Path = Path("notebooks")
    runs_root: Path = Path("runs")
    reports_root: Path = Path("reports")
    kernel: str = ""  # "": the registered `mirl` kernel, else this interpreter's python3
    cell_timeout_s: int = 3600
    force: bool = False
    first: str | None = None
    last: str | None = None
    recipes: list[str] | None = None  # the recipes whose training runs (None: every one)
    parallel: int = 1  # recipes' trainings run at once, each in a process of its own (1: one after another)
    line_every_s: float | None = None  # None: 0.5 s in place on a terminal, 10 s otherwise

    @property
    def run_dir(self) -> Path:
        return Path(self.runs_root) / self.run_name

    @property
    def reports_dir(self) -> Path:
        return Path(self.reports_root) / self.run_name


@dataclass
class Outcome:
    ok: bool
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: str | None = None
    message: str = ""


# --- state ------------------------------------------------------------------------------------


def read_state(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / STATE
    if not path.exists():
        return {"stages": {}}
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise BatchError(f"{path}: not valid JSON ({e}); delete it to start the batch's bookkeeping afresh") from e
    state.setdefault("stages", {})
    return state


def params_digest(parameters: dict[str, Any]) -> str:
    """The digest of a notebook's resolved parameters (the run's name, roots and --force left out)."""
    return digest(flatten({k: v for k, v in parameters.items() if k not in RESERVED}))


def stage_digest(own: str, inputs: dict[str, str | None]) -> str:
    return digest(flatten({"params": own, "inputs": inputs}))


def input_stamp(entry: dict[str, Any] | None) -> str | None:
    """An earlier stage as a later one depends on it: its digest (params and inputs) and which run of it
    made its outputs (when it started, how long it ran, whether it finished). A stage that ran again with
    the same params, e.g. a recipe's training that was stopped at a deadline and then finished, is new
    input: what was evaluated while it was unfinished is evaluated again."""
    if not entry:
        return None
    return digest(flatten({"digest": entry.get("digest"), "started": entry.get("started"),
                           "elapsed_s": entry.get("elapsed_s"), "complete": bool(entry.get("complete"))}))


def skip_reason(nb: Notebook, entry: dict[str, Any] | None, want: str, run: RunDir, reports: Path) -> str | None:
    """Why `nb` can be skipped (None: it must run); `run` and `reports` are the unit's own."""
    if not entry or entry.get("digest") != want or not entry.get("complete"):
        return None
    summary = run.read_summary(nb.stage)
    if not summary or not summary.get("complete"):
        return None
    if not (reports / nb.path.name).exists():
        return None
    return "complete with the same params"


# --- the live line ------------------------------------------------------------------------------


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def progress_line(prefix: str, progress: dict[str, Any] | None, elapsed: float) -> str:
    """`[2/4] 02 taxonomy  12/40 items  3.10 item/s  ETA 0:09  flags=3  (0:04)`."""
    if not progress:
        return f"{prefix}  starting  ({clock(elapsed)})"
    unit = progress.get("unit") or "item"
    parts = [prefix]
    desc = progress.get("desc")
    if desc and not prefix.endswith(desc):
        parts.append(f"[{desc}]")
    parts.append(f"{progress.get('done', 0)}/{progress.get('total', '?')} {unit}s")
    rate = progress.get("rate") or 0.0
    parts.append(f"{rate:.2f} {unit}/s" if rate >= 0.1 or rate == 0 else f"{1 / rate:.1f} s/{unit}")
    parts.append(f"ETA {clock(progress.get('eta_s'))}")
    parts += [f"{k}={v}" for k, v in (progress.get("fields") or {}).items()]
    return "  ".join(parts) + f"  ({clock(elapsed)})"


class LiveLine(threading.Thread):
    """Polls a stage's progress file and redraws its line until stopped."""

    def __init__(self, prefix: str, path: Path, out: TextIO, every_s: float | None, in_place: bool | None = None):
        super().__init__(daemon=True)
        self.prefix, self.path, self.out = prefix, path, out
        tty = bool(getattr(out, "isatty", lambda: False)())
        self.tty = tty if in_place is None else in_place and tty
        self.every_s = every_s if every_s is not None else (0.5 if self.tty else 10.0)
        self.t0 = time.monotonic()
        self._stop_event = threading.Event()
        self.last = ""

    def read(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def run(self) -> None:
        while not self._stop_event.wait(self.every_s):
            self.draw()

    def draw(self) -> None:
        self.last = progress_line(self.prefix, self.read(), time.monotonic() - self.t0)
        if self.tty:
            self.out.write("\r" + self.last + "\x1b[K")
        else:
            self.out.write(self.last + "\n")
        self.out.flush()

    def stop(self) -> None:
        """No more redraws (idempotent)."""
        self._stop_event.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join()

    def finish(self, text: str) -> None:
        self.stop()
        self.out.write(("\r" + text + "\x1b[K\n") if self.tty else text + "\n")
        self.out.flush()


# --- running ------------------------------------------------------------------------------------


@contextlib.contextmanager
def _lock(run_dir: Path):
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / LOCK, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise BatchError(f"another `mirl batch` is running on {run_dir} (wait for it, or use another --name)") from e
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield


def export_html(notebook: Path) -> Path | None:
    """The executed notebook as HTML beside it (images embedded); None when nbconvert cannot."""
    import nbconvert
    import nbformat

    exporter = nbconvert.HTMLExporter()
    exporter.log.setLevel(logging.ERROR)  # not a warning per figure without alt text
    try:
        body, _ = exporter.from_notebook_node(nbformat.read(str(notebook), as_version=4))
    except Exception as e:  # noqa: BLE001 - the report page links what exists
        print(f"warning: no HTML export of {notebook}: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    html = notebook.with_suffix(".html")
    html.write_text(body, encoding="utf-8")
    redact_secrets(html)
    return html


def _groups(chosen: list[Unit], parallel: int) -> list[list[Unit]]:
    """The units in the order they run: consecutive recipes' trainings in groups of up to `parallel`
    that run at once, every other unit alone."""
    out: list[list[Unit]] = []
    for u in chosen:
        last = out[-1] if out else []
        if u.recipe is not None and last and last[-1].recipe is not None and last[-1].nb == u.nb \
                and len(last) < max(1, parallel):
            last.append(u)
        else:
            out.append([u])
    return out


def _plan(spec: BatchSpec) -> tuple[list[Notebook], str, list[Any], list[Unit], dict[str, dict[str, Any]]]:
    """The pipeline's notebooks, the kernel, the params' recipes, the notebook runs they make, and each
    run's resolved parameters: every one checked before any kernel starts (a bad one raises, named)."""
    from mirl import recipes as recipe_files

    notebooks = discover(spec.notebooks_dir)
    kernel = kernel_name(spec.kernel)
    recipes = recipe_files.load(spec.params_file, spec.overrides)
    every = units(notebooks, recipes)
    resolved = {u.key: resolve_parameters(_run_spec(spec, u, kernel, spec.force))[0] for u in every}
    return notebooks, kernel, recipes, every, resolved


def check_batch(spec: BatchSpec, rates_from: str | Path | None = None) -> list[str]:
    """What `mirl batch --check` prints: every stage notebook's parameters resolved (a bad one raises
    `ParamsError` naming it), then the evaluation's design (`mirl.evaluate.design`). Runs nothing."""
    from mirl import params as pipeline
    from mirl.evaluate.design import plan_design

    notebooks, kernel, recipes, every, _ = _plan(spec)
    params = pipeline.load(spec.params_file, spec.overrides)
    lines = [f"params: {len(every)} stage notebook run(s) valid ({', '.join(u.label for u in every)})"]
    if spec.first or spec.last or spec.recipes:  # a misspelt --from/--to/--recipes fails here, not at the run
        chosen = select_units(every, spec.first, spec.last, spec.recipes)
        lines.append(f"selected: {', '.join(u.label for u in chosen)}")
    if recipes:
        lines += recipe_budgets(recipes, spec.overrides)
    if any(nb.stage == "misbehavior_rate" for nb in notebooks):
        lines.append("evaluation design: " + plan_design(params, spec.run_dir, rates_from).line())
    return lines


def recipe_budgets(recipes: list[Any], overrides: dict[str, Any]) -> list[str]:
    """One line per recipe: its training budget in rollouts (the most its step count and tries allow),
    and a warning when the recipes' budgets differ (a comparison of recipes wants the same budget)."""
    from mirl import params as pipeline

    lines, caps = [], {}
    for r in recipes:
        t = pipeline.load(r.params_file, overrides).training
        caps[r.name] = t.steps * t.max_tries * t.group_size
        reward = f"{t.reward} (judged over the taxonomy)" if t.reward == "mirl" and t.judge_scope == "taxonomy" else t.reward
        if t.reward == "mirl" and t.forbid:
            reward += f" (r_e also forbids {', '.join(t.forbid)})"
        lines.append(f"recipe {r.name}: start {t.start}, reward {reward}; {t.steps} steps x {t.batch_size} groups x "
                     f"{t.group_size} rollouts, at most {caps[r.name]} rollouts ({t.max_tries} tries a step)")
    if len(set(caps.values())) > 1:
        lines.append("warning: the recipes' rollout budgets differ: " + ", ".join(f"{k} {v}" for k, v in caps.items()))
    return lines


def run_batch(spec: BatchSpec, out: TextIO | None = None) -> Outcome:
    """Run (or skip) each selected stage in order (the training stage once per recipe the params list,
    up to `spec.parallel` of them at once); stop after the first failure. Prints to `out`."""
    from mirl import params as pipeline
    from mirl import recipes as recipe_files
    from mirl.report_index import write_index

    out = out or sys.stdout
    _, kernel, recipes, every, resolved = _plan(spec)
    chosen = select_units(every, spec.first, spec.last, spec.recipes)
    raw = pipeline.apply_overrides(pipeline.read_file(spec.params_file), spec.overrides)
    if recipes:
        raw["recipes"] = {r.name: str(r.params_file) for r in recipes}
    reports = spec.reports_dir
    with _lock(spec.run_dir):
        state = read_state(spec.run_dir)
        state.update(run=spec.run_name, params_file=str(spec.params_file or ""), kernel=kernel,
                     notebooks=[{"number": u.nb.number, "stage": u.key, "notebook": str(u.nb.path)} for u in every])
        recipe_files.prepare(spec.run_dir, recipes)
        print(f"batch {spec.run_name}: {len(chosen)} stage(s) ({', '.join(u.label for u in chosen)}), "
              f"kernel {kernel}, data in {spec.run_dir}, reports in {reports}", file=out, flush=True)
        t_batch = time.monotonic()
        run = _Run(spec, out, kernel, every, chosen, resolved, state,
                   lambda: write_index(spec.run_dir, reports, state, raw))
        for group in _groups(chosen, spec.parallel):
            run.group(group)
            if not run.outcome.ok:
                break
        outcome = run.outcome
        if outcome.ok:
            write_index(spec.run_dir, reports, state, raw)
            print(f"batch {spec.run_name}: {len(outcome.ran)} ran, {len(outcome.skipped)} skipped, "
                  f"{clock(time.monotonic() - t_batch)}; report: {reports / 'index.html'}", file=out, flush=True)
        print(time_table(state, outcome.ran), file=out, flush=True)
    return outcome


@dataclass
class _Started:
    """A unit the batch has started: what its end needs to know."""

    unit: Unit
    line: LiveLine
    t0: float
    previous: dict[str, Any]  # its batch.json entry before this run


class _Run:
    """One `run_batch`: its record (batch.json), its outcome, and the units it starts and finishes."""

    def __init__(self, spec: BatchSpec, out: TextIO, kernel: str, every: list[Unit], chosen: list[Unit],
                 resolved: dict[str, dict[str, Any]], state: dict[str, Any], write_index: Any):
        self.spec, self.out, self.kernel, self.every, self.chosen = spec, out, kernel, every, chosen
        self.resolved, self.state, self.write_index = resolved, state, write_index
        self.state_path = spec.run_dir / STATE
        self.outcome = Outcome(ok=True)
        self.started: dict[Job, _Started] = {}

    def group(self, group: list[Unit]) -> None:
        """Run the units of one group: one in this process, several at once in processes of their own."""
        ready = [r for r in (self.prepare(u) for u in group) if r is not None]
        jobs = []
        for u, fields, prefix, progress, previous in ready:
            # units that run at once share the GPU, and their lines are printed one under another
            job = Job(**fields, gpu_share=1 / len(ready))
            line = LiveLine(prefix, progress, self.out, self.spec.line_every_s,
                            in_place=None if len(ready) == 1 else False)
            self.started[job] = _Started(u, line, time.monotonic(), previous)
            jobs.append(job)
        for job in jobs:
            self.started[job].line.start()
        try:
            if len(jobs) == 1:
                self.done(jobs[0], run_job(jobs[0]))
            elif jobs:
                run_at_once(jobs, self.done)
        finally:
            for job in jobs:
                self.started[job].line.stop()

    def prepare(self, u: Unit) -> tuple[Unit, dict[str, Any], str, Path, dict[str, Any]] | None:
        """Skip `u` (None) or record it as running: its job's fields, its line's prefix and progress file."""
        spec, state = self.spec, self.state
        prefix = f"[{self.chosen.index(u) + 1}/{len(self.chosen)}] {u.label}"
        before = self.every[:self.every.index(u)]
        inputs = {b.key: input_stamp(state["stages"].get(b.key)) for b in before if b.nb != u.nb}
        own = params_digest(self.resolved[u.key])
        want = stage_digest(own, inputs)
        entry = state["stages"].get(u.key)
        previous = dict(entry or {})
        unit_run = RunDir(Path(spec.runs_root) / u.run_name(spec.run_name))
        unit_reports = Path(spec.reports_root) / u.run_name(spec.run_name)
        why = skip_reason(u.nb, entry, want, unit_run, unit_reports)
        if why:
            print(f"{prefix}  skipped: {why} ({unit_run.stage_dir(u.nb.stage)})", file=self.out, flush=True)
            self.outcome.skipped.append(u.key)
            return None
        # overwrite only outputs made with other params; a stage resumed with its own params keeps its items
        force = spec.force and not (entry and entry.get("digest") == want)
        started = datetime.now(UTC).isoformat(timespec="seconds")
        output = unit_reports / u.nb.path.name
        reports = spec.reports_dir
        logs = reports / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{u.key.replace(':', '-')}.log"
        state["stages"][u.key] = {"number": u.nb.number, "stage": u.nb.stage, "recipe": u.recipe and u.recipe.name,
                                  "notebook": output.relative_to(reports).as_posix(),
                                  "log": log_path.relative_to(reports).as_posix(), "params_digest": own,
                                  "inputs": inputs, "digest": want, "complete": False, "status": "running",
                                  "started": started, "elapsed_s": None, "error": None, "forced": force}
        atomic_write_json(self.state_path, state)
        progress = unit_run.file(u.nb.stage, PROGRESS)
        progress.unlink(missing_ok=True)
        fields = dict(label=u.label, notebook=u.nb.path, spec=_run_spec(spec, u, self.kernel, force),
                      log_path=log_path, output=output, started=started, params_digest=own)
        return u, fields, prefix, progress, previous

    def done(self, job: Job, failure: Failure | None) -> None:
        """Record how a unit's run ended (the first failure or unfinished stage is the batch's outcome)."""
        s = self.started[job]
        u, line, outcome = s.unit, s.line, self.outcome
        elapsed = round(time.monotonic() - s.t0, 3)
        unit_run = RunDir(Path(self.spec.runs_root) / u.run_name(self.spec.run_name))
        entry = self.state["stages"][u.key]
        entry["elapsed_s"] = elapsed
        if job.output.exists():
            export_html(job.output)
        if failure is not None:
            entry.update(status="failed", error=failure.text)
            if failure.ename == "ParamsMismatch":  # refused: its outputs are still the old ones
                entry["digest"] = s.previous.get("digest")
            line.finish(f"{line.prefix}  FAILED after {clock(elapsed)}")
            if outcome.ok:
                outcome.ok, outcome.failed = False, u.key
                outcome.message = (f"error: {failure.text}\n  the partly executed notebook: {job.output}\n"
                                   f"  the kernel's log: {job.log_path}\n  fix it and run the same command "
                                   "again: finished stages are skipped")
        else:
            summary = unit_run.read_summary(u.nb.stage)
            complete = bool(summary and summary.get("complete"))
            entry.update(status="complete" if complete else "incomplete", complete=complete,
                         stage_elapsed_s=(summary or {}).get("elapsed_s"))
            line.finish(f"{line.prefix}  {'done' if complete else 'stopped'} in {clock(elapsed)}" + _headline(summary))
            outcome.ran.append(u.key)
            if not complete:
                why = (summary or {}).get("stopped") or f"no complete summary.json in {unit_run.stage_dir(u.nb.stage)}"
                entry["error"] = f"not complete: {why}"
                if outcome.ok:
                    outcome.ok, outcome.failed = False, u.key
                    outcome.message = (f"error: stage {u.label} ran but did not finish ({why}); later "
                                       "stages were not run. Run the same command again to continue it.")
        atomic_write_json(self.state_path, self.state)
        self.write_index()


def time_table(state: dict[str, Any], ran: list[str]) -> str:
    """Wall time per stage of the batch's record (the last run of each), so a time budget is visible:
    the kernel's whole run of the notebook, and the stage's own work from its summary.json."""
    rows = [("stage", "status", "notebook", "stage work", "")]
    total = 0.0
    for stage, e in state.get("stages", {}).items():
        wall = e.get("elapsed_s")
        total += wall or 0.0
        own = e.get("stage_elapsed_s")
        rows.append((f"{e.get('number', '')} {stage}", str(e.get("status", "?")), clock(wall), clock(own),
                     "" if stage in ran else "(earlier run)"))
    rows.append(("total", "", clock(total), "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


HEADLINE_KEYS = ("error_steps", "types")  # stage summaries' own counts shown beside the runner's


def _headline(summary: dict[str, Any] | None) -> str:
    if not summary:
        return ""
    counted = [k for k in ("done", "planned", "new", "lost") if isinstance(summary.get(k), (int, float))]
    counted += ["errors"] if summary.get("errors") else []
    if counted and not summary.get("planned") and not summary.get("done"):
        counted = []  # a stage whose work is not items (the offline taxonomy): its own numbers say more
    own = [k for k in HEADLINE_KEYS if isinstance(summary.get(k), (int, float))]
    keys = counted + own
    return ("  (" + ", ".join(f"{k.replace('_', ' ')} {summary[k]}" for k in keys) + ")") if keys else ""


def _run_spec(spec: BatchSpec, unit: Unit, kernel: str, force: bool) -> RunSpec:
    """The notebook run of a unit: a recipe's training reads the recipe's params file, in its own run."""
    params_file = spec.params_file if unit.recipe is None else unit.recipe.params_file
    return RunSpec(notebook=unit.nb.path, run_name=unit.run_name(spec.run_name), params_file=params_file,
                   overrides=spec.overrides, runs_root=Path(spec.runs_root), reports_root=Path(spec.reports_root),
                   kernel=kernel, cell_timeout_s=spec.cell_timeout_s, force=force)

