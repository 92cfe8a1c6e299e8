"""Synthetic stage notebooks for `mirl batch` tests: real papermill, a real kernel, the real runner.

Each notebook names an existing stage in `metadata.mirl.stage` and runs `tiny_stage.run` on it; the
kernel is the `mirl` kernelspec, registered for this interpreter under a temporary JUPYTER_PATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def write_notebook(path: Path, stage: str, body: str) -> Path:
    params = 'run_name = "demo"\nruns_root = "runs"\nreports_root = "reports"\nforce = False'
    cells = [
        {"cell_type": "code", "execution_count": None, "id": "params", "metadata": {"tags": ["parameters"]},
         "outputs": [], "source": params},
        {"cell_type": "markdown", "id": "title", "metadata": {}, "source": f"# {stage}"},
        {"cell_type": "code", "execution_count": None, "id": "setup", "metadata": {}, "outputs": [],
         "source": f"import sys\nsys.path.insert(0, {str(HERE)!r})\nimport tiny_stage"},
        {"cell_type": "code", "execution_count": None, "id": "work", "metadata": {}, "outputs": [], "source": body},
    ]
    nb = {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"name": "mirl", "display_name": "Python (mirl)", "language": "python"},
                       "mirl": {"stage": stage}}}
    path.write_text(json.dumps(nb, indent=1))
    return path


def stage_body(stage: str, **kw) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
    return (f"print('hello from {stage}')\n"
            "import logging\nlogging.getLogger('tiny').warning('a warning for the log')\n"
            f"summary = tiny_stage.run(globals(), {stage!r}{', ' + args if args else ''})\n"
            "logging.getLogger('mirl.tiny').info('an info record for the log')\n"
            "summary['done']")


def three_stages(directory: Path, hold_at: int = -1, delay: float = 0.0) -> Path:
    """01 profiling (3 items, a figure and a table) -> 02 taxonomy (4 items) -> 03 prefixes (2 items)."""
    directory.mkdir(parents=True, exist_ok=True)
    write_notebook(directory / "01_profiling.ipynb", "profiling", stage_body("profiling", items=3, figure=True))
    write_notebook(directory / "02_taxonomy_review.ipynb", "taxonomy",
                   stage_body("taxonomy", items=4, delay=delay, hold_at=hold_at, reads=("profiling",)))
    write_notebook(directory / "03_prefix_filtering.ipynb", "prefixes",
                   stage_body("prefixes", items=2, reads=("taxonomy",)))
    return directory


def register_kernel(prefix: Path) -> str:
    """The `mirl` kernelspec for this interpreter under `prefix`; returns the JUPYTER_PATH entry."""
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(prefix), "--name", "mirl",
                    "--display-name", "Python (mirl, test)"], check=True, capture_output=True)
    return str(prefix / "share" / "jupyter")


def child_env(jupyter_path: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["JUPYTER_PATH"] = jupyter_path
    env.pop("MIRL_PROGRESS", None)
    return env


def calls(run: Path) -> list[str]:
    path = run / "calls.log"
    return path.read_text().splitlines() if path.exists() else []
