"""Running the stage notebooks headless (papermill) and giving them typed parameters.

A stage notebook names its stage (= its section of the params file) in its metadata::

    "metadata": {"mirl": {"stage": "profiling"}}

Its parameters cell is generated from the params classes (`parameters_source`; a test fails when
the notebook's cell differs): the run's name and roots, the shared sections `models`, `sandbox` and
`agent` as mappings (empty = defaults), then the stage's own settings as flat literals.

`mirl run` reads the params file (`params/demo.yaml`), applies `-p SECTION.KEY=VALUE` overrides and
validates the whole of it *before* starting a kernel (unknown sections or keys and wrong types fail
at once, naming the key and the file), then executes the notebook with papermill: data goes to
`runs/<RUN>/`, the executed notebook and figures to `reports/<RUN>/`. Inside the notebook,
`notebook_params(globals())` turns the parameters cell into the same typed `mirl.params.Params`, so
papermill's string coercion cannot bite either way.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from mirl import params as pipeline
from mirl.typed import ParamsError, help_text

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
KERNEL = "mirl"
LOG_ENV = "MIRL_LOG_FILE"
RESERVED = ("run_name", "runs_root", "reports_root", "force")
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)


@dataclass
class RunSpec:
    """What `mirl run` needs to execute one notebook."""

    notebook: Path
    run_name: str = field(default="demo", metadata={"help": "data in runs/<run_name>/, reports in reports/<run_name>/"})
    params_file: Path | None = field(default=None, metadata={"help": "params YAML: shared sections, then one per stage"})
    overrides: dict[str, Any] = field(default_factory=dict, metadata={"help": "SECTION.KEY=VALUE overrides, after the file"})
    runs_root: Path = field(default=Path("runs"), metadata={"help": "where run data goes"})
    reports_root: Path = field(default=Path("reports"), metadata={"help": "where executed notebooks and figures go"})
    kernel: str = field(default="", metadata={"help": "Jupyter kernel name; empty: `mirl` when registered, else python3"})
    cell_timeout_s: int = field(default=3600, metadata={"help": "seconds one cell may run before the run fails"})
    force: bool = field(default=False, metadata={"help": "overwrite the stage's outputs made with other params"})


def kernel_name(requested: str = "") -> str:
    """The kernel notebooks run on: `requested`, else $MIRL_KERNEL, else `mirl` (the kernel
    `scripts/setup.sh` registers for its venv, which the notebooks' metadata names) when registered,
    else python3, which papermill starts with this very interpreter (so the same mirl either way)."""
    name = requested or os.environ.get("MIRL_KERNEL", "")
    if name:
        return name
    from jupyter_client.kernelspec import KernelSpecManager

    return KERNEL if KERNEL in KernelSpecManager().find_kernel_specs() else "python3"


def notebook_meta(path: Path) -> dict[str, Any]:
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ParamsError(f"{path}: cannot read the notebook: {e.strerror or e}") from None
    except ValueError as e:  # not UTF-8, or not JSON
        raise ParamsError(f"{path}: not a Jupyter notebook (not JSON: {e})") from None
    metadata = nb.get("metadata") if isinstance(nb, dict) else None
    meta = metadata.get("mirl") if isinstance(metadata, dict) else None
    if not isinstance(meta, dict) or "stage" not in meta:
        raise ParamsError(f"{path}: notebook metadata has no mirl.stage entry")
    if meta["stage"] not in pipeline.stage_sections():
        raise ParamsError(f"{path}: mirl.stage {meta['stage']!r} is no stage; stages: "
                          f"{', '.join(pipeline.stage_sections())}")
    return meta


def parameters_source(stage: str) -> str:
    """The parameters cell of a stage notebook, generated from the params classes."""
    lines = [f"# parameters: `mirl run` injects the params file's values (shared sections, then section `{stage}`)",
             'run_name = "demo"', 'runs_root = "runs"', 'reports_root = "reports"',
             "# overwrite this stage's outputs if they were made with other params", "force = False",
             "# shared sections as mappings; empty = defaults (see mirl.params)"]
    lines += [f"{name} = {{}}" for name in pipeline.SHARED]
    cls = pipeline.section_class(stage)
    helps = help_text(cls)
    lines.append(f"# section `{stage}`")
    for f in dataclasses.fields(cls):
        lines.append(f"# {helps[f.name]}")
        lines.append(f"{f.name} = {_literal(getattr(cls(), f.name))!r}")
    return "\n".join(lines)


def parameters_cell(path: Path) -> str:
    nb = json.loads(Path(path).read_text())
    for cell in nb["cells"]:
        if "parameters" in (cell.get("metadata", {}).get("tags") or []):
            return "".join(cell["source"])
    raise ParamsError(f"{path}: no cell tagged `parameters`")


def sync_parameters_cell(path: Path) -> bool:
    """Rewrite a notebook's parameters cell from the params classes; True when it changed."""
    source = parameters_source(notebook_meta(path)["stage"])  # a file that is no stage notebook is named here
    nb = json.loads(Path(path).read_text())
    for cell in nb["cells"]:
        if "parameters" in (cell.get("metadata", {}).get("tags") or []):
            if "".join(cell["source"]) == source:
                return False
            cell["source"] = source.splitlines(keepends=True)
            Path(path).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
            return True
    raise ParamsError(f"{path}: no cell tagged `parameters`")


def resolve_parameters(spec: RunSpec) -> tuple[dict[str, Any], pipeline.Params]:
    """The parameters papermill injects, and the typed params they make (validated here, whole)."""
    stage = notebook_meta(spec.notebook)["stage"]
    raw = pipeline.apply_overrides(pipeline.read_file(spec.params_file), spec.overrides)
    typed = pipeline.from_values(raw, str(spec.params_file) if spec.params_file else "params")
    flat: dict[str, Any] = {name: raw.get(name) or {} for name in pipeline.SHARED}
    section = getattr(typed, stage)
    flat.update({f.name: _literal(getattr(section, f.name)) for f in dataclasses.fields(section)})
    flat.update(run_name=spec.run_name, runs_root=str(spec.runs_root), reports_root=str(spec.reports_root),
                force=spec.force)
    return flat, typed


def _literal(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return value


def notebook_params(namespace: dict[str, Any], stage: str | None = None) -> pipeline.Params:
    """Inside a notebook: the typed params from the parameters cell's variables (shared sections as
    mappings, the stage's settings flat). `stage` defaults to the one whose fields the cell holds."""
    if stage is None:
        stage = next(s for s in pipeline.stage_sections()
                     if all(f.name in namespace for f in dataclasses.fields(pipeline.section_class(s))))
    names = {f.name for f in dataclasses.fields(pipeline.section_class(stage))}
    values: dict[str, Any] = {name: namespace.get(name) or {} for name in pipeline.SHARED}
    values[stage] = {k: v for k, v in namespace.items() if k in names}
    return pipeline.from_values(values, "the notebook's parameters cell")


def run_dirs(namespace: dict[str, Any]) -> tuple[Path, Path]:
    """Inside a notebook: (runs/<run>, reports/<run>), created; the report style (`mirl.plotstyle`) applied."""
    from mirl import plotstyle

    plotstyle.apply()
    log_to_file()
    run = str(namespace.get("run_name", "demo"))
    data = Path(namespace.get("runs_root", "runs")) / run
    reports = Path(namespace.get("reports_root", "reports")) / run
    data.mkdir(parents=True, exist_ok=True)
    reports.mkdir(parents=True, exist_ok=True)
    return data, reports


def log_to_file() -> None:
    """Under `mirl batch` ($MIRL_LOG_FILE set for the kernel): mirl's log records, INFO and up, go to the
    stage's log file instead of the cells, so an executed notebook stays small and the log complete."""
    path = os.environ.get(LOG_ENV, "")
    logger = logging.getLogger("mirl")
    if not path or any(getattr(h, "baseFilename", None) == str(Path(path).resolve()) for h in logger.handlers):
        return
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def redact_secrets(path: Path) -> int:
    """Replace the values of secret-looking environment variables in a written file; returns hits."""
    secrets = [v for k, v in os.environ.items() if SECRET_NAME.search(k) and len(v) >= 8]
    if not secrets or not path.is_file():
        return 0
    text = path.read_text(errors="replace")
    hits = 0
    for value in secrets:
        if value in text:
            hits += text.count(value)
            text = text.replace(value, "[REDACTED]")
    if hits:
        path.write_text(text)
    return hits


def execute(spec: RunSpec, log_file: TextIO | None = None) -> Path:
    """Run one notebook with papermill; returns the executed notebook's path.

    With `log_file`, the kernel's stdout and stderr go to that file instead of this process's log (the
    way `mirl batch` keeps papermill from relaying every progress frame as a warning)."""
    import papermill

    parameters, _ = resolve_parameters(spec)  # fail before any kernel starts
    notebook = Path(spec.notebook).resolve()
    reports = (Path(spec.reports_root) / spec.run_name).resolve()
    (Path(spec.runs_root) / spec.run_name).mkdir(parents=True, exist_ok=True)
    reports.mkdir(parents=True, exist_ok=True)
    parameters.update(runs_root=str(Path(spec.runs_root).resolve()), reports_root=str(Path(spec.reports_root).resolve()))
    output = reports / notebook.name
    t0 = time.monotonic()
    log.info("running %s -> %s", notebook.name, output)
    try:
        papermill.execute_notebook(
            str(notebook), str(output), parameters=parameters, kernel_name=kernel_name(spec.kernel),
            cwd=str(Path.cwd()), execution_timeout=spec.cell_timeout_s, progress_bar=log_file is None,
            log_output=log_file is None, stdout_file=log_file, stderr_file=log_file, report_mode=False,
        )
    finally:
        hits = redact_secrets(output)
        if hits:
            log.warning("redacted %d secret value(s) from %s", hits, output)
    log.info("%s done in %.1f s", notebook.name, time.monotonic() - t0)
    return output


def main(argv: list[str] | None = None) -> int:
    """`python -m mirl.notebook --sync NOTEBOOK...`: regenerate parameters cells from the params classes."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mirl.notebook")
    parser.add_argument("--sync", nargs="+", metavar="NOTEBOOK", required=True)
    args = parser.parse_args(argv)
    missing = [p for p in args.sync if not Path(p).is_file()]
    if missing:  # before any is rewritten
        parser.error(f"no such notebook: {', '.join(missing)}")
    for path in args.sync:
        try:
            changed = sync_parameters_cell(Path(path))
        except ValueError as e:  # ParamsError: not JSON, no stage in its metadata, no parameters cell
            parser.error(str(e))
        print(f"{path}: {'rewritten' if changed else 'up to date'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
