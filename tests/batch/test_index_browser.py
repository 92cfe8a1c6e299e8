"""`reports/<run>/index.html` after a batch, opened in headless Chromium: it renders with its figures,
every link reaches a file, and it holds the run's stages, headline numbers and fingerprints. A
screenshot is saved under the test's tmp_path (its path is printed)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from batch_pipeline import three_stages

from mirl.batch import BatchSpec, run_batch
from tests.real import missing

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_index_renders_with_figures_and_no_broken_links(tmp_path, mirl_kernel):
    if not (Path(CHROMIUM).exists() and os.access(CHROMIUM, os.X_OK)):
        missing(f"Debian's chromium at {CHROMIUM}", "apt-get install chromium (bash scripts/setup.sh --system)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("the playwright Python package", "pip install -e '.[test]'")

    notebooks = three_stages(tmp_path / "nb")
    params = tmp_path / "params.yaml"
    params.write_text("taxonomy:\n  seed: 3\n")
    spec = BatchSpec(params_file=params, run_name="t", notebooks_dir=notebooks, runs_root=tmp_path / "runs",
                     reports_root=tmp_path / "reports", cell_timeout_s=120)
    assert run_batch(spec, out=io.StringIO()).ok
    reports, run = tmp_path / "reports" / "t", tmp_path / "runs" / "t"
    index = reports / "index.html"
    assert (reports / "profiling_squares.png").exists() and (reports / "profiling_squares.pdf").exists()

    shot = tmp_path / "index.png"
    failed: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.on("requestfailed", lambda r: failed.append(r.url))
            page.goto(index.as_uri())
            page.wait_for_load_state("load")
            assert page.title() == "mirl run t"
            images = page.eval_on_selector_all("img", "els => els.map(e => [e.getAttribute('src'), e.naturalWidth])")
            assert images == [["profiling_squares.png", images[0][1]]] and images[0][1] > 100, images
            hrefs = page.eval_on_selector_all("a", "els => els.map(e => e.href)")
            stages = page.inner_text("#stages + table")
            page.screenshot(path=str(shot), full_page=True)
            print(f"screenshot: {shot}")
        finally:
            browser.close()
    assert not failed, failed
    targets = {Path(unquote(urlparse(h).path)) for h in hrefs}
    assert all(t.is_file() for t in targets), [str(t) for t in targets if not t.is_file()]
    expected = {reports / f"{n}.{ext}" for n in ("01_profiling", "02_taxonomy_review", "03_prefix_filtering")
                for ext in ("ipynb", "html")}
    expected |= {reports / "logs" / f"{s}.log" for s in ("profiling", "taxonomy", "prefixes")}
    expected |= {reports / "profiling_squares.png", reports / "profiling_squares.pdf", reports / "profiling_squares.csv"}
    assert targets == expected

    # the stages' headline numbers come from their summaries; fingerprints from their params.json
    for stage, items in (("profiling", 3), ("taxonomy", 4), ("prefixes", 2)):
        summary = json.loads((run / stage / "summary.json").read_text())
        assert summary["sum_of_squares"] == sum(i * i for i in range(items))
        assert f"sum_of_squares {summary['sum_of_squares']}" in stages
    text = index.read_text()
    for stage in ("profiling", "taxonomy", "prefixes"):
        assert json.loads((run / stage / "params.json").read_text())["digest"] in text
    assert "seed: 3" in text and stages.count("complete") == 3
