"""Running the stage notebooks headless (papermill) and giving them typed parameters.

A stage notebook declares in its metadata which config dataclass its parameters cell fills::

    "metadata": {"mirl": {"stage": "profiling", "params": "mirl.profiling.config:ProfilingParams"}}

`mirl run` reads the stage's section of a params YAML (`params/demo.yaml`: `profiling: {...}`),
applies `-p KEY=VALUE` overrides, validates them against that dataclass *before* starting a kernel
(unknown keys and wrong types fail at once, naming the key), then executes the notebook with
papermill: data goes to `runs/<RUN>/`, the executed notebook and figures to `reports/<RUN>/`.
Inside the notebook, `notebook_params(Cls, globals())` turns the parameters cell's flat literals
into the same typed object, so papermill's string coercion cannot bite either way.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mirl.config import ParamsError, build

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
RESERVED = ("run_name", "runs_root", "reports_root")
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)


@dataclass
class RunSpec:
    """What `mirl run` needs to execute one notebook."""

    notebook: Path
    run_name: str = field(default="demo", metadata={"help": "data in runs/<run_name>/, reports in reports/<run_name>/"})
    params_file: Path | None = field(default=None, metadata={"help": "params YAML with one section per stage"})
    overrides: dict[str, Any] = field(default_factory=dict, metadata={"help": "KEY=VALUE overrides, after the file"})
    runs_root: Path = field(default=Path("runs"), metadata={"help": "where run data goes"})
    reports_root: Path = field(default=Path("reports"), metadata={"help": "where executed notebooks and figures go"})
    kernel: str = field(default="python3", metadata={"help": "Jupyter kernel name"})
    cell_timeout_s: int = field(default=3600, metadata={"help": "seconds one cell may run before the run fails"})


def notebook_meta(path: Path) -> dict[str, Any]:
    nb = json.loads(Path(path).read_text())
    meta = nb.get("metadata", {}).get("mirl")
    if not isinstance(meta, dict) or "params" not in meta or "stage" not in meta:
        raise ParamsError(f"{path}: notebook metadata has no mirl.stage / mirl.params entry")
    return meta


def params_class(dotted: str) -> type:
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


def stage_values(params_file: Path | None, stage: str) -> dict[str, Any]:
    if params_file is None:
        return {}
    data = yaml.safe_load(Path(params_file).read_text()) or {}
    if not isinstance(data, dict):
        raise ParamsError(f"{params_file}: must map stage names to parameter sections")
    section = data.get(stage, {}) or {}
    if not isinstance(section, dict):
        raise ParamsError(f"{params_file}: section {stage!r} must be a mapping")
    return dict(section)


def resolve_parameters(spec: RunSpec) -> tuple[dict[str, Any], Any]:
    """The flat parameters papermill injects, and the typed object they make (validated here)."""
    meta = notebook_meta(spec.notebook)
    cls = params_class(meta["params"])
    values = stage_values(spec.params_file, meta["stage"])
    values.update(spec.overrides)
    typed = build(cls, values)
    flat = {f.name: _literal(getattr(typed, f.name)) for f in dataclasses.fields(typed)}
    flat.update(run_name=spec.run_name, runs_root=str(spec.runs_root), reports_root=str(spec.reports_root))
    return flat, typed


def _literal(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return value


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """KEY=VALUE pairs; VALUE is read as YAML so numbers, booleans and lists keep their type."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ParamsError(f"override {pair!r} must look like KEY=VALUE")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            out[key.strip()] = value
    return out


def notebook_params(cls: type, namespace: dict[str, Any]) -> Any:
    """Inside a notebook: the typed params object from the parameters cell's variables."""
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in namespace.items() if k in names}
    return build(cls, values)


def run_dirs(namespace: dict[str, Any]) -> tuple[Path, Path]:
    """Inside a notebook: (runs/<run>, reports/<run>), created."""
    run = str(namespace.get("run_name", "demo"))
    data = Path(namespace.get("runs_root", "runs")) / run
    reports = Path(namespace.get("reports_root", "reports")) / run
    data.mkdir(parents=True, exist_ok=True)
    reports.mkdir(parents=True, exist_ok=True)
    return data, reports


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


def execute(spec: RunSpec) -> Path:
    """Run one notebook with papermill; returns the executed notebook's path."""
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
            str(notebook), str(output), parameters=parameters, kernel_name=spec.kernel,
            cwd=str(Path.cwd()), execution_timeout=spec.cell_timeout_s, progress_bar=True,
            log_output=True, report_mode=False,
        )
    finally:
        hits = redact_secrets(output)
        if hits:
            log.warning("redacted %d secret value(s) from %s", hits, output)
    log.info("%s done in %.1f s", notebook.name, time.monotonic() - t0)
    return output
