"""One notebook run of `mirl batch`, in this process or in a child process of its own, and several at once.

The batch runs its units one after another in its own process. Recipes' trainings are independent of
each other (each in its own run directory, each reading the shared stages 01-03), and on one GPU a
training of a small policy leaves most of the device idle (its steps wait on sandboxes and tests), so
`mirl batch --parallel N` runs up to N of them at once. Each then runs in a child process: the kernel
inherits its parent's environment and file descriptor 2, which are per process, and each unit's kernel
needs its own log in both, and its own share of the GPU for its engine's KV pages (`MIRL_GPU_SHARE`,
1/N: trainings that start together each see the GPU nearly free, and would each size their pages from that).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, TextIO

from mirl import notebook as nbrun
from mirl.engines import GPU_SHARE_ENV
from mirl.notebook import RunSpec, execute, redact_secrets
from mirl.runner.progress import ENV

# after an interrupt, how long a child may take to stop its kernel before it is killed (under the 20 s
# after which benchmarks/gpu/small_scale.sh kills the batch that its deadline's SIGINT did not stop)
STOP_GRACE_S = 15.0


@dataclass(frozen=True)
class Failure:
    """Why a unit's notebook run failed: one paragraph naming the notebook and the cell, and the error's
    name when a cell raised it (a `ParamsMismatch` leaves the stage's old outputs in place)."""

    text: str
    ename: str = ""


@dataclass(frozen=True, eq=False)  # told apart by identity (its spec holds a dict)
class Job:
    """A unit ready to run: what papermill needs, where its log goes and what it is called in messages."""

    label: str        # "04 training [mirl]"
    notebook: Path    # the stage notebook it runs
    spec: RunSpec
    log_path: Path
    output: Path      # the executed notebook
    started: str      # ISO time, for the log's header
    params_digest: str
    gpu_share: float = 1.0  # of the GPU, for its engine's KV pages: 1/N when N run at once


@contextlib.contextmanager
def kernel_env(values: dict[str, str]) -> Iterator[None]:
    """Environment variables the kernel inherits (it is started from this process)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def stderr_to(log: TextIO) -> Iterator[None]:
    """File descriptor 2 into the stage's log while its kernel runs: the kernel process inherits it, so
    what it writes outside any cell (start-up warnings, native libraries, a crash) lands there too."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def run_job(job: Job) -> Failure | None:
    """Run the job's notebook, its kernel writing to the job's log; None when every cell ran."""
    error: BaseException | None = None
    t0 = time.monotonic()
    with open(job.log_path, "a", encoding="utf-8") as log, \
            kernel_env({ENV: "file", nbrun.LOG_ENV: str(job.log_path.resolve()), **_share(job.gpu_share)}), \
            stderr_to(log):
        log.write(f"=== {job.started} stage {job.label}: {job.notebook} (kernel {job.spec.kernel}, "
                  f"params {job.params_digest}) ===\n")
        log.flush()
        try:
            execute(job.spec, log_file=log)
        except Exception as e:  # noqa: BLE001 - reported below, with the notebook and the cell
            error = e
        log.write(f"=== {'failed' if error else 'finished'} after {time.monotonic() - t0:.1f} s ===\n")
    redact_secrets(job.log_path)
    if error is None:
        return None
    return Failure(failure_text(job.label, job.notebook, error, job.output, job.spec.cell_timeout_s),
                   getattr(error, "ename", "") or "")


def _share(mine: float) -> dict[str, str]:
    """The kernel's GPU share: this job's part of the share the batch itself was given, if any."""
    if mine >= 1:
        return {}  # the batch's own (or none), inherited
    raw = os.environ.get(GPU_SHARE_ENV, "").strip()
    try:
        given = float(raw) if raw else 1.0
    except ValueError:
        return {}  # the engine names the bad value
    return {GPU_SHARE_ENV: f"{given * mine:.6g}"}


def failure_text(label: str, notebook: Path, error: BaseException, output: Path, timeout_s: int) -> str:
    """One paragraph: which notebook, which cell, what went wrong."""
    import nbclient.exceptions as nbx
    import papermill

    if isinstance(error, papermill.PapermillExecutionError):
        what = f"failed in cell {error.exec_count}: {error.ename}: {error.evalue}"
    elif isinstance(error, nbx.DeadKernelError):
        what = f"the kernel died while running {_running_cell(output)} ({error}); a cell that exits the " \
               "process, a crash in native code, or the machine running out of memory (dmesg says which)"
    elif isinstance(error, nbx.CellTimeoutError):
        what = f"{_running_cell(output)} ran longer than the cell timeout ({timeout_s} s; raise it with --cell-timeout)"
    else:
        what = f"could not run: {type(error).__name__}: {error}"
    return f"stage {label} ({notebook}) {what}"


def _running_cell(output: Path) -> str:
    """The cell that was running when the kernel went away, from papermill's cell metadata."""
    try:
        cells = json.loads(output.read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return "a cell"
    started = [(i, c) for i, c in enumerate(cells) if (c.get("metadata", {}).get("papermill") or {}).get("start_time")]
    if not started:
        return "a cell"
    i, cell = started[-1]
    first = "".join(cell.get("source", "")).strip().splitlines()[:1]
    count = cell.get("execution_count")
    return f"cell {count if count is not None else f'#{i + 1}'}" + (f" ({first[0][:60]!r})" if first else "")


TEXT_CAP = 8000  # characters of a failure's text a child sends back (its whole traceback is in the log)


def _child(conn: Any, job: Job) -> None:
    """A child process's whole life: run the job, send back how it went. The first SIGINT interrupts the
    run (papermill then shuts its kernel down); any later one is ignored, so that shutdown is not cut short
    (a deadline's `timeout` signals the batch and its whole process group, this child included)."""
    def first_only(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, first_only)
    # the whole process's stderr into the job's log: what is printed after the run (asyncio's report of
    # a kernel that died while it was stopped, say) belongs to the job, not to the batch's console
    with contextlib.suppress(OSError):
        os.dup2(os.open(job.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644), 2)
    try:
        result: Failure | None = run_job(job)
    except BaseException as e:  # noqa: BLE001 - an interrupt or a bug here: the parent still hears of it
        result = Failure(f"stage {job.label} ({job.notebook}) stopped: {type(e).__name__}: {e}", type(e).__name__)
    if result is not None and len(result.text) > TEXT_CAP:
        result = Failure(result.text[:TEXT_CAP] + f" [... cut; the whole text is in {job.log_path}]", result.ename)
    with contextlib.suppress(OSError):  # the parent has gone (it was interrupted): nobody to tell
        conn.send(result)
        conn.close()


def run_at_once(jobs: list[Job], on_done: Callable[[Job, Failure | None], None]) -> None:
    """Run the jobs at once, each in a child process of its own; `on_done` is called here as each ends, in
    the order they end (the others run on after a failure: it is no reason to lose their work). A child
    that ends without a result is a failure that says how it ended. An interrupt (Ctrl-C, a deadline's
    SIGINT) is passed on to the children, which stop their kernels, and then raised here."""
    ctx = multiprocessing.get_context("spawn")  # not fork: this process has threads (the live lines)
    running: dict[Any, tuple[Job, Any, Any]] = {}  # sentinel -> (job, process, our end of its pipe)
    results: dict[Any, Failure | None] = {}  # sentinel -> what its child sent
    try:
        for job in jobs:
            ours, theirs = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(theirs, job), name=f"mirl-batch {job.label}", daemon=False)
            proc.start()
            theirs.close()
            running[proc.sentinel] = (job, proc, ours)
        while running:
            pipes = {ours: sentinel for sentinel, (_, _, ours) in running.items() if sentinel not in results}
            for ready in wait([*running, *pipes]):
                if ready in pipes:  # read as soon as it is sent: a child blocks on a full pipe until then
                    with contextlib.suppress(EOFError, OSError):
                        results[pipes[ready]] = ready.recv()
                    continue
                job, proc, ours = running.pop(ready)
                if ready not in results:
                    with contextlib.suppress(EOFError, OSError):
                        if ours.poll():
                            results[ready] = ours.recv()
                proc.join()
                ours.close()
                on_done(job, results.pop(ready) if ready in results else _died(job, proc))
    except BaseException:
        _stop([proc for _, proc, _ in running.values()])
        raise


def _died(job: Job, proc: Any) -> Failure:
    code = proc.exitcode
    how = (f"killed by signal {-code} ({signal.Signals(-code).name}; out of memory is one cause: dmesg says)"
           if code is not None and code < 0 else f"exit code {code}; its traceback is on the batch's stderr")
    return Failure(f"stage {job.label} ({job.notebook}): the process running it ended without a result ({how})",
                   "ChildDied")


def _stop(procs: list[Any]) -> None:
    """Interrupt the children (each stops its kernel), then kill any still there after the grace. This
    process ignores SIGINT meanwhile: a deadline's second one must not cut the wait short."""
    old = None
    with contextlib.suppress(ValueError):  # not the main thread: no signal to hold off
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for p in procs:
            if p.is_alive():
                with contextlib.suppress(OSError):
                    os.kill(p.pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_S
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
