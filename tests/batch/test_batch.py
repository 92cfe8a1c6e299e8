"""`mirl batch` on synthetic stage notebooks: real papermill, a real `mirl` kernel, the real runner.

Resume after a kill, skip on the same params and rerun on changed ones, --from/--to, the first
failure (an exception, a kernel that dies), the live progress line and the per-stage log file.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batch_pipeline import calls, child_env, stage_body, three_stages, write_notebook

from mirl.batch import (
    BatchError,
    BatchSpec,
    discover,
    input_stamp,
    progress_line,
    run_batch,
    select_units,
    time_table,
    units,
)
from mirl.notebook import KERNEL, kernel_name

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


def spec(tmp_path: Path, notebooks: Path, **kw) -> BatchSpec:
    return BatchSpec(params_file=None, run_name="t", notebooks_dir=notebooks, runs_root=tmp_path / "runs",
                     reports_root=tmp_path / "reports", cell_timeout_s=120, **kw)


def state(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "runs" / "t" / "batch.json").read_text())


def done_items(lines: list[str], stage: str) -> list[int]:
    return sorted(int(x.split()[2]) for x in lines if x.startswith(f"{stage} done "))


def test_stages_by_name_or_number(tmp_path):
    nbs = discover(three_stages(tmp_path / "nb"))
    assert [(n.number, n.stage) for n in nbs] == [("01", "profiling"), ("02", "taxonomy"), ("03", "prefixes")]
    every = units(nbs, [])

    def select(first, last):
        return [u.key for u in select_units(every, first, last)]

    assert select("02", None) == ["taxonomy", "prefixes"]
    assert select("profiling", "2") == ["profiling", "taxonomy"]
    assert select("prefixes", "03") == ["prefixes"]
    with pytest.raises(BatchError, match=r"no stage '05'.*01 \(profiling\)"):
        select("05", None)
    with pytest.raises(BatchError, match="comes after"):
        select("03", "01")
    with pytest.raises(BatchError, match="taxonomy:mirl: this batch has no training recipes"):
        select("taxonomy:mirl", None)


def test_one_recipes_training_is_named_by_stage_and_recipe(tmp_path):
    from types import SimpleNamespace

    nbs = discover(three_stages(tmp_path / "nb"))
    training = nbs[1].__class__("04", "training", nbs[1].path)  # a training stage between taxonomy and prefixes
    every = units([nbs[0], training, nbs[2]], [SimpleNamespace(name=r) for r in ("mirl", "outcome", "tmax")])
    keys = [u.key for u in every]
    assert keys == ["profiling", "training:mirl", "training:outcome", "training:tmax", "prefixes"]

    def select(first, last):
        return [u.key for u in select_units(every, first, last)]

    assert select("training:outcome", "training:outcome") == ["training:outcome"]
    assert select("04:tmax", None) == ["training:tmax", "prefixes"]
    assert select(None, "training:mirl") == ["profiling", "training:mirl"]
    assert select("training", "training") == keys[1:4]  # a stage: every recipe's run
    assert select("profiling", "training") == keys[:4]
    with pytest.raises(BatchError, match="no recipe 'rar' in this batch; recipes: mirl, outcome, tmax"):
        select("training:rar", None)
    with pytest.raises(BatchError, match="no recipe '' in this batch"):
        select("training:", None)
    with pytest.raises(BatchError, match="prefixes:tmax: only the training stage runs once per recipe"):
        select("prefixes:tmax", None)
    with pytest.raises(BatchError, match="comes after"):
        select("training:tmax", "training:mirl")
    # --recipes: one recipe trained, then the stages after it, in one call (a --to past the training
    # stage would otherwise train every recipe on the way)
    assert [u.key for u in select_units(every, "training:mirl", "prefixes", ["mirl"])] == ["training:mirl", "prefixes"]
    assert [u.key for u in select_units(every, None, None, ["tmax", "mirl"])] == [
        "profiling", "training:mirl", "training:tmax", "prefixes"]
    with pytest.raises(BatchError, match=r"--recipes mirl,rar: no recipe 'rar' in this batch; recipes: mirl, outcome"):
        select_units(every, None, None, ["mirl", "rar"])
    with pytest.raises(BatchError, match=r"no recipe 'mirl' in this batch; recipes: none"):
        select_units(units(nbs, []), None, None, ["mirl"])


def test_kernel_registered_at_install_is_the_one_notebooks_name(mirl_kernel, monkeypatch):
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert re.search(r"ipykernel install --sys-prefix --name \"\$KERNEL\"", setup)
    assert re.search(r"KERNEL=\$\{MIRL_KERNEL:-" + KERNEL + r"\}", setup)
    for path in sorted((REPO / "notebooks").glob("0[1-4]_*.ipynb")):
        assert json.loads(path.read_text())["metadata"]["kernelspec"]["name"] == KERNEL, path
    monkeypatch.delenv("MIRL_KERNEL", raising=False)
    assert kernel_name() == KERNEL  # registered (under the fixture's JUPYTER_PATH)
    # not registered anywhere (the README's set-up also registers it in the venv, so hide every spec)
    from jupyter_client.kernelspec import KernelSpecManager

    monkeypatch.setattr(KernelSpecManager, "find_kernel_specs", lambda self: {"python3": "/nowhere"})
    assert kernel_name() == "python3"  # papermill's python3 is this interpreter
    assert kernel_name("other") == "other"


@pytest.mark.slow
def test_resume_after_a_kill_redoes_no_finished_stage(tmp_path, mirl_kernel):
    notebooks = three_stages(tmp_path / "nb", hold_at=2, delay=0.1)
    run = tmp_path / "runs" / "t"
    run.mkdir(parents=True)
    (run / "hold").write_text("")
    cmd = [sys.executable, "-m", "mirl", "batch", "--name", "t", "--notebooks", str(notebooks), "--cell-timeout", "120"]
    env = child_env(mirl_kernel)
    log = open(tmp_path / "first.out", "w")
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 150
        while "taxonomy start 2" not in calls(run):  # stage 02 waits on its item 2
            assert proc.poll() is None, (tmp_path / "first.out").read_text()
            assert time.monotonic() < deadline, (tmp_path / "first.out").read_text()
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        log.close()
    before = calls(run)
    assert state(tmp_path)["stages"]["taxonomy"]["status"] == "running"
    assert done_items(before, "profiling") == [0, 1, 2] and "prefixes start 0" not in before
    taxonomy_done = done_items(before, "taxonomy")
    assert 2 not in taxonomy_done

    (run / "hold").unlink()
    second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=200)
    assert second.returncode == 0, second.stdout + second.stderr
    assert re.search(r"\[1/3\] 01 profiling  skipped", second.stdout)
    after = calls(run)
    assert done_items(after, "profiling") == [0, 1, 2], "finished stage redone"
    assert done_items(after, "taxonomy") == sorted([*taxonomy_done, *[i for i in range(4) if i not in taxonomy_done]])
    assert len(done_items(after, "taxonomy")) == 4, "a finished item was redone"
    assert done_items(after, "prefixes") == [0, 1]
    st = state(tmp_path)["stages"]
    assert {s: (e["status"], e["complete"]) for s, e in st.items()} == {
        s: ("complete", True) for s in ("profiling", "taxonomy", "prefixes")}
    for name in ("01_profiling", "02_taxonomy_review", "03_prefix_filtering"):
        assert (tmp_path / "reports" / "t" / f"{name}.ipynb").exists()
        assert (tmp_path / "reports" / "t" / f"{name}.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.slow
def test_skip_on_same_params_rerun_on_changed(tmp_path, mirl_kernel):
    notebooks = three_stages(tmp_path / "nb")
    run = tmp_path / "runs" / "t"
    printed = io.StringIO()
    first = run_batch(spec(tmp_path, notebooks), out=printed)
    assert first.ok and first.ran == ["profiling", "taxonomy", "prefixes"]
    n = len(calls(run))
    # the closing table gives each stage's time, as batch.json records it
    table = printed.getvalue().splitlines()[-5:]
    assert [r.split()[:3] for r in table[1:4]] == [["01", "profiling", "complete"], ["02", "taxonomy", "complete"],
                                                    ["03", "prefixes", "complete"]]
    assert all(state(tmp_path)["stages"][s]["stage_elapsed_s"] is not None for s in ("profiling", "taxonomy", "prefixes"))

    out = io.StringIO()
    again = run_batch(spec(tmp_path, notebooks), out=out)
    assert again.ok and again.ran == [] and again.skipped == ["profiling", "taxonomy", "prefixes"]
    assert len(calls(run)) == n, "a skipped stage ran"
    assert out.getvalue().count("skipped: complete with the same params") == 3

    # taxonomy's params change: profiling stays, taxonomy refuses its old outputs without --force
    changed = spec(tmp_path, notebooks, overrides={"taxonomy.seed": 7})
    refused = run_batch(changed, out=io.StringIO())
    assert not refused.ok and refused.skipped == ["profiling"] and refused.failed == "taxonomy"
    assert "made with other params" in refused.message and "settings.seed: 0 -> 7" in refused.message
    assert len(calls(run)) == n

    changed.force = True
    forced = run_batch(changed, out=io.StringIO())
    assert forced.ok and forced.skipped == ["profiling"] and forced.ran == ["taxonomy", "prefixes"]
    new = calls(run)[n:]
    assert done_items(new, "taxonomy") == [0, 1, 2, 3] and done_items(new, "prefixes") == [0, 1]
    assert done_items(new, "profiling") == []
    st = state(tmp_path)["stages"]
    assert st["prefixes"]["inputs"]["taxonomy"] == input_stamp(st["taxonomy"])

    # the same changed params again: all skipped; a stage whose summary is no longer complete runs again
    assert run_batch(changed, out=io.StringIO()).skipped == ["profiling", "taxonomy", "prefixes"]
    summary = run / "taxonomy" / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "complete": False}))
    # (and what reads it runs again: the taxonomy it read may have changed since)
    resumed = run_batch(changed, out=io.StringIO())
    assert resumed.ran == ["taxonomy", "prefixes"] and resumed.skipped == ["profiling"]


@pytest.mark.slow
def test_from_and_to(tmp_path, mirl_kernel):
    notebooks = three_stages(tmp_path / "nb")
    run = tmp_path / "runs" / "t"
    only_first = run_batch(spec(tmp_path, notebooks, last="01"), out=io.StringIO())
    assert only_first.ran == ["profiling"] and set(state(tmp_path)["stages"]) == {"profiling"}
    middle = run_batch(spec(tmp_path, notebooks, first="taxonomy", last="taxonomy"), out=io.StringIO())
    assert middle.ran == ["taxonomy"] and set(state(tmp_path)["stages"]) == {"profiling", "taxonomy"}
    assert done_items(calls(run), "prefixes") == []
    assert not (tmp_path / "reports" / "t" / "03_prefix_filtering.ipynb").exists()


@pytest.mark.slow
def test_first_failure_names_notebook_cell_and_error(tmp_path, mirl_kernel):
    notebooks = three_stages(tmp_path / "nb")
    broken = notebooks / "02_taxonomy_review.ipynb"
    write_notebook(broken, "taxonomy", "x = 1\nraise ValueError('no error steps: 42')")
    outcome = run_batch(spec(tmp_path, notebooks), out=io.StringIO())
    assert not outcome.ok and outcome.ran == ["profiling"] and outcome.failed == "taxonomy"
    executed = json.loads((tmp_path / "reports" / "t" / broken.name).read_text())
    failing = [c for c in executed["cells"] if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert len(failing) == 1
    assert f"stage 02 taxonomy ({broken}) failed in cell {failing[0]['execution_count']}: " \
           "ValueError: no error steps: 42" in outcome.message
    assert str(tmp_path / "reports" / "t" / "logs" / "taxonomy.log") in outcome.message
    assert "prefixes" not in state(tmp_path)["stages"]
    assert state(tmp_path)["stages"]["taxonomy"]["status"] == "failed"

    three_stages(notebooks)  # fixed: the batch goes on from the failed stage
    fixed = run_batch(spec(tmp_path, notebooks), out=io.StringIO())
    assert fixed.ok and fixed.skipped == ["profiling"] and fixed.ran == ["taxonomy", "prefixes"]


@pytest.mark.slow
def test_a_kernel_that_dies_is_reported_as_such(tmp_path, mirl_kernel):
    notebooks = three_stages(tmp_path / "nb")
    write_notebook(notebooks / "02_taxonomy_review.ipynb", "taxonomy", "import os; os._exit(3)  # the kernel's own exit")
    outcome = run_batch(spec(tmp_path, notebooks), out=io.StringIO())
    assert not outcome.ok and outcome.failed == "taxonomy"
    assert "the kernel died while running cell" in outcome.message
    assert "import os; os._exit(3)" in outcome.message
    assert state(tmp_path)["stages"]["taxonomy"]["status"] == "failed"
    assert "prefixes" not in state(tmp_path)["stages"]


@pytest.mark.slow
def test_progress_line_and_log_file(tmp_path, mirl_kernel):
    notebooks = tmp_path / "nb"
    notebooks.mkdir()
    write_notebook(notebooks / "01_profiling.ipynb", "profiling", stage_body("profiling", items=8, delay=0.5))
    out = io.StringIO()
    outcome = run_batch(spec(tmp_path, notebooks, line_every_s=0.25), out=out)
    assert outcome.ok, outcome.message
    text = out.getvalue()
    live = re.findall(r"^\[1/1\] 01 profiling  (\d)/8 items  ([\d.]+) item/s  ETA (\d+:\d\d)  last=(\d)  \(\d+:\d\d\)$",
                      text, re.M)
    assert live, text
    assert any(0 < int(done) < 8 and float(rate) > 0 for done, rate, _, _ in live), text
    assert re.search(r"^\[1/1\] 01 profiling  done in \d+:\d\d  \(done 8, planned 8, new 8, lost 0\)$", text, re.M)
    final = json.loads((tmp_path / "runs" / "t" / "profiling" / "progress.json").read_text())
    assert (final["done"], final["total"], final["finished"], final["fields"]) == (8, 8, True, {"last": final["fields"]["last"]})

    log = (tmp_path / "reports" / "t" / "logs" / "profiling.log").read_text()
    assert "hello from profiling" in log and "a warning for the log" in log
    executed = json.loads((tmp_path / "reports" / "t" / "01_profiling.ipynb").read_text())
    streams = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", [])
                      if o.get("output_type") == "stream")
    assert "item/s" not in streams and "%|" not in streams, "a progress bar was drawn into the notebook"
    bars = [o for c in executed["cells"] for o in c.get("outputs", [])
            if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert not bars, "a progress widget was drawn into the notebook"
    assert re.search(r"^\d\d:\d\d:\d\d INFO mirl.tiny: an info record for the log$", log, re.M), log
    assert "an info record" not in streams, "mirl's log records went into the cells"


def test_progress_line_format():
    p = {"desc": "taxonomy", "unit": "item", "done": 12, "total": 40, "rate": 3.1, "eta_s": 9.0,
         "fields": {"flags": 3}}
    assert progress_line("[2/4] 02 taxonomy", p, 4.2) == \
        "[2/4] 02 taxonomy  12/40 items  3.10 item/s  ETA 0:09  flags=3  (0:04)"
    slow = {**p, "desc": "training", "unit": "step", "rate": 0.02, "eta_s": 3725}
    assert progress_line("[4/4] 04 training", slow, 65) == \
        "[4/4] 04 training  12/40 steps  50.0 s/step  ETA 1:02:05  flags=3  (1:05)"
    assert progress_line("[1/2] 01 profiling", None, 3) == "[1/2] 01 profiling  starting  (0:03)"


def test_time_table_gives_each_stage_and_the_total():
    st = {"stages": {"profiling": {"number": "01", "status": "complete", "elapsed_s": 200.4, "stage_elapsed_s": 180.0},
                     "taxonomy": {"number": "02", "status": "complete", "elapsed_s": 61.0, "stage_elapsed_s": None},
                     "training": {"number": "04", "status": "failed", "elapsed_s": 3601.0}}}
    rows = [r.split() for r in time_table(st, ran=["taxonomy", "training"]).splitlines()]
    assert rows[0] == ["stage", "status", "notebook", "stage", "work"]
    assert rows[1] == ["01", "profiling", "complete", "3:20", "3:00", "(earlier", "run)"]
    assert rows[2] == ["02", "taxonomy", "complete", "1:01", "?"]
    assert rows[3] == ["04", "training", "failed", "1:00:01", "?"]
    assert rows[4] == ["total", "1:04:22"]


def test_a_stage_without_items_shows_its_own_counts_not_zeros():
    from mirl.batch import _headline

    assert _headline({"done": 0, "planned": 0, "new": 0, "lost": 0, "error_steps": 34, "types": 6}) == \
        "  (error steps 34, types 6)"
    assert _headline({"done": 8, "planned": 8, "new": 8, "lost": 0}) == "  (done 8, planned 8, new 8, lost 0)"


def test_check_refuses_a_misspelt_selection_before_anything_runs(tmp_path):
    import os

    base = [sys.executable, "-m", "mirl", "batch", "--params", str(REPO / "params" / "small_scale" / "experiment.yaml"),
            "--name", "chk", "--check", "--notebooks", str(REPO / "notebooks")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    bad = subprocess.run([*base, "--from", "training:tmx"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=env)
    assert bad.returncode != 0 and "no recipe 'tmx' in this batch; recipes: mirl, outcome-prefix, tmax" in bad.stderr
    good = subprocess.run([*base, "--from", "training:tmax", "--to", "05"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env)
    assert good.returncode == 0, good.stderr
    assert "selected: 04 training [tmax], 05 misbehavior_rate" in good.stdout
    assert not (tmp_path / "runs").exists()
