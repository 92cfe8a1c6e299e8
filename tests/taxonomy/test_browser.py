"""The curation widget in a real JupyterLab, clicked in headless Chromium: it renders, two types are
merged by clicking, Save writes a new taxonomy version that has the merged type. A screenshot of the
page is kept under the test's tmp_path (its path is printed)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from curation_run import A, B, C, D, make_run

from mirl.records.taxonomy import TaxonomyStore
from tests.real import missing

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
MERGED = "stops without real work"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notebook(path: Path, run: Path) -> None:
    cell = ("from mirl.taxonomy.widget import CurationUI\n"
            f"ui = CurationUI({str(run)!r})\n"
            "ui.show()")
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": "curate", "metadata": {},
                     "outputs": [], "source": cell}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))


def run_first_cell(page, tries: int = 3, wait_s: float = 30.0):
    """Run the notebook's first cell with Shift+Enter and return its widget. A key pressed while the
    page is still settling can be lost: while the cell has not run (no `[*]` or `[N]` prompt), press again."""
    widget = page.locator(".mirl-curation").first
    prompt = page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first
    for _ in range(tries):
        page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first.click(timeout=90_000)
        page.keyboard.press("Shift+Enter")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not widget.is_visible():
            page.wait_for_timeout(250)
        if widget.is_visible():
            return widget
        if "*" in prompt.inner_text():  # running or queued behind the kernel's start: wait for it
            widget.wait_for(timeout=90_000)
            return widget
    output = page.locator(".jp-Notebook .jp-Cell .jp-OutputArea").first
    raise AssertionError(f"the curation widget did not appear after {tries} runs of the cell: prompt "
                         f"{prompt.inner_text()!r}, output {output.inner_text()[:1000] if output.count() else ''!r}")


def lab_env(home: Path) -> dict[str, str]:
    """JupyterLab's own dirs under `home` (no user settings or workspaces leak in), this tree's mirl first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR", "JUPYTERLAB_WORKSPACES_DIR"):
        env[var] = str(home / var.lower())
    settings = home / "jupyterlab_settings_dir" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    # no news or update toast over the notebook (and no fetch for them)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false",
                                                                           "checkForUpdates": False}))
    return env


def wait_for_server(url: str, proc: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"jupyter lab did not answer {url.split('?')[0]} in {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    """End the server and its kernel (their own process group, started for this test)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_merge_by_clicking_in_jupyterlab(tmp_path):
    if not (Path(CHROMIUM).exists() and os.access(CHROMIUM, os.X_OK)):
        missing(f"Debian's chromium at {CHROMIUM}", "apt-get install chromium (bash scripts/setup.sh --system)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("the playwright Python package", "pip install -e '.[test]'")
    if shutil.which("jupyter-lab", path=str(Path(sys.executable).parent)) is None:
        missing("jupyterlab in this Python environment", "pip install -e .")

    run = make_run(tmp_path / "demo")
    lab = tmp_path / "lab"
    lab.mkdir()
    write_notebook(lab / "curate.ipynb", run)
    port, token = free_port(), secrets.token_hex(16)
    log = tmp_path / "jupyter.log"
    env = lab_env(tmp_path / "home")
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", f"--IdentityProvider.token={token}",
             "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={lab}", "--ServerApp.port_retries=0",
             "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
             "--LabApp.extension_manager=readonly", *(["--allow-root"] if os.geteuid() == 0 else [])],
            cwd=lab, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    shot = tmp_path / "curation.png"
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for_server(f"{base}/api/status?token={token}", proc, log)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1500, "height": 1300})
                page.goto(f"{base}/lab/tree/curate.ipynb?token={token}")
                widget = run_first_cell(page)
                types = widget.locator(".mirl-types select")
                assert types.locator("option").count() == 4
                types.locator("option", has_text=B).click()
                types.locator("option", has_text=C).click(modifiers=["Control"])
                widget.locator(".mirl-new-name input").fill(MERGED)
                widget.locator("button.mirl-merge").click()
                types.locator("option", has_text=MERGED).wait_for(timeout=30_000)
                widget.locator("button.mirl-save").click()
                widget.locator(".mirl-status", has_text="saved version 2").wait_for(timeout=30_000)
                page.screenshot(path=str(shot))
                print(f"screenshot: {shot}")
            finally:
                browser.close()
    finally:
        stop(proc)

    store = TaxonomyStore(run / "taxonomy")
    assert store.versions() == [1, 2]
    v2 = store.load(2)
    assert set(v2.names()) == {A, MERGED, D} and v2.parent == 1
    assert [(e["op"], set(e["types"]), e["into"]) for e in v2.edits] == [("merge", {B, C}, MERGED)]
    assert v2.get(MERGED).status == "kept"  # 4 of 10 steps, over the 0.25 threshold
    assert {lb.id for lb in store.load_labels(2) if MERGED in lb.types} == {
        "count-lines/0/3", "fix-permissions/0/2", "count-lines/1/2", "parse-logs/0/4"}
    assert B in store.load(1).names() and C in store.load(1).names()  # the old version stays
    assert shot.stat().st_size > 10_000
