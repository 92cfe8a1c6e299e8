"""`mirl batch` over the real notebooks 01-03 on their defaults (SmolLM2 policy, rule localizer,
reference teacher, offline taxonomy, exact prefix reruns) on bubblewrap, tiny: 2 tasks, 1 seed, 2
steps, 32 tokens a reply. Then the same command again skips all three without starting a kernel."""

from __future__ import annotations

import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from mirl.batch import BatchSpec, run_batch
from tests.real import missing

REPO = Path(__file__).resolve().parents[2]
FIGURES = ("profiling_overview", "taxonomy_figure4", "taxonomy_figure4_paper", "prefix_funnel", "prefix_funnel_paper")
NOTEBOOKS = ("01_profiling", "02_taxonomy_review", "03_prefix_filtering")


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.imgs = [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a":
            self.hrefs.append(a["href"])
        if tag == "img":
            self.imgs.append(a["src"])


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.timeout(1500)
def test_notebooks_01_to_03_tiny(tmp_path, mirl_kernel):
    from mirl.sandbox import bwrap_backend
    from tests.engines.smollm2 import require_smollm2

    require_smollm2()
    if not bwrap_backend.available():
        missing("bubblewrap or the base root filesystem", "`apt-get install bubblewrap`, then `mirl image build`")
    params = tmp_path / "tiny.yaml"
    params.write_text((REPO / "params" / "demo.yaml").read_text())
    overrides = {"sandbox.backend": "bwrap", "profiling.tasks": str(REPO / "tasks"), "profiling.max_tasks": 2,
                 "profiling.seeds": 1, "agent.max_steps": 2, "models.policy.max_tokens": 32}
    spec = BatchSpec(params_file=params, run_name="tiny", overrides=overrides, notebooks_dir=REPO / "notebooks",
                     runs_root=tmp_path / "runs", reports_root=tmp_path / "reports", cell_timeout_s=1200,
                     last="03", line_every_s=5)
    out = io.StringIO()
    outcome = run_batch(spec, out=out)
    assert outcome.ok, outcome.message + "\n" + out.getvalue()
    assert outcome.ran == ["profiling", "taxonomy", "prefixes"]
    assert re.search(r"^\[1/3\] 01 profiling  \d/2 items  ", out.getvalue(), re.M), out.getvalue()
    run, reports = tmp_path / "runs" / "tiny", tmp_path / "reports" / "tiny"
    state = json.loads((run / "batch.json").read_text())
    assert [(s, e["status"]) for s, e in state["stages"].items()] == [
        ("profiling", "complete"), ("taxonomy", "complete"), ("prefixes", "complete")]
    assert len({json.loads(line)["task"] for line in (run / "profiling" / "trajectories.jsonl").open()}) == 2

    for name in FIGURES:
        assert (reports / f"{name}.png").stat().st_size > 5000 and (reports / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
    for name in NOTEBOOKS:
        executed = json.loads((reports / f"{name}.ipynb").read_text())
        assert not any(o.get("output_type") == "error" for c in executed["cells"] for o in c.get("outputs", []))
        streams = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", [])
                          if o.get("output_type") == "stream")
        assert "%|" not in streams, f"{name}: a progress bar in the cells"
        assert (reports / f"{name}.html").stat().st_size > 10_000
    page = Links()
    page.feed((reports / "index.html").read_text())
    assert sorted(page.imgs) == sorted(f"{n}.png" for n in FIGURES)
    assert all((reports / h).is_file() for h in page.hrefs), [h for h in page.hrefs if not (reports / h).is_file()]
    assert {f"{n}.pdf" for n in FIGURES} | {f"{n}.html" for n in NOTEBOOKS} <= set(page.hrefs)
    assert {p.name for p in reports.glob("*.csv")} <= set(page.hrefs)

    trajectories = (run / "profiling" / "trajectories.jsonl").stat().st_mtime_ns
    again = run_batch(spec, out=io.StringIO())
    assert again.ok and again.ran == [] and again.skipped == ["profiling", "taxonomy", "prefixes"]
    assert (run / "profiling" / "trajectories.jsonl").stat().st_mtime_ns == trajectories
