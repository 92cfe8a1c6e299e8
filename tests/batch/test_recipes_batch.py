"""`mirl batch` with training recipes, on synthetic stage notebooks (real papermill, kernel and runner):
the training notebook once per recipe in its own run directory under the run's, the shared stages
read through links, skip and rerun per recipe, and a recipe that changes more than training refused."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batch_pipeline import calls, child_env, stage_body, write_notebook

from mirl.batch import BatchSpec, input_stamp, run_batch
from mirl.typed import ParamsError

pytestmark = pytest.mark.timeout(300)


def pipeline(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    write_notebook(directory / "01_profiling.ipynb", "profiling", stage_body("profiling", items=2))
    write_notebook(directory / "03_prefix_filtering.ipynb", "prefixes", stage_body("prefixes", items=2,
                                                                                  reads=("profiling",)))
    write_notebook(directory / "04_training_launch.ipynb", "training", stage_body("training", items=2, figure=True,
                                                                                 reads=("prefixes",)))
    write_notebook(directory / "05_misbehavior_rate.ipynb", "misbehavior_rate", stage_body("misbehavior_rate", items=1))
    return directory


def params(directory: Path, b_lr: float = 1e-5) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "base.yaml").write_text("training:\n  steps: 1\nprofiling:\n  seeds: 1\n")
    (directory / "a.yaml").write_text("base: base.yaml\ntraining:\n  recipe: a\n")
    (directory / "b.yaml").write_text(f"base: base.yaml\ntraining:\n  recipe: b\n  reward: outcome\n  lr: {b_lr}\n")
    (directory / "exp.yaml").write_text("base: base.yaml\nrecipes: [a.yaml, b.yaml]\n")
    return directory / "exp.yaml"


def spec(tmp_path: Path, params_file: Path, **kw) -> BatchSpec:
    return BatchSpec(params_file=params_file, run_name="t", notebooks_dir=tmp_path / "nb", runs_root=tmp_path / "runs",
                     reports_root=tmp_path / "reports", cell_timeout_s=120, **kw)


@pytest.mark.slow
def test_each_recipe_trains_in_its_own_run_on_the_shared_stages(tmp_path, mirl_kernel):
    pipeline(tmp_path / "nb")
    exp = params(tmp_path / "params")
    run = tmp_path / "runs" / "t"
    first = run_batch(spec(tmp_path, exp), out=io.StringIO())
    assert first.ok, first.message
    assert first.ran == ["profiling", "prefixes", "training:a", "training:b", "misbehavior_rate"]
    for name, reward in (("a", "mirl"), ("b", "outcome")):
        own = run / "recipes" / name
        assert os.readlink(own / "prefixes") == os.path.join("..", "..", "prefixes")
        assert json.loads((own / "training" / "summary.json").read_text())["complete"]
        # the recipe's own params reached its notebook (its stage fingerprints them)
        stored = json.loads((own / "training" / "params.json").read_text())["fingerprint"]
        assert stored["settings.recipe"] == name and stored["settings.reward"] == reward
        assert sorted(x for x in calls(own) if x.startswith("training done")) == ["training done 0", "training done 1"]
        assert (tmp_path / "reports" / "t" / "recipes" / name / "04_training_launch.ipynb").exists()
        assert (tmp_path / "reports" / "t" / "logs" / f"training-{name}.log").exists()
    assert not (run / "training").exists()
    state = json.loads((run / "batch.json").read_text())["stages"]
    assert state["misbehavior_rate"]["inputs"]["training:b"] == input_stamp(state["training:b"])
    assert json.loads((run / "recipes.json").read_text()) == ["a", "b"]
    index = (tmp_path / "reports" / "t" / "index.html").read_text()
    # each recipe's notebook, log, headline, figure and table are on the run's page
    for link in ("recipes/b/04_training_launch.ipynb", "logs/training-a.log", "recipes/a/training_squares.png",
                 "recipes/b/training_squares.csv"):
        assert f'href="{link}"' in index or f"href='{link}'" in index, link
    assert "sum_of_squares <b>1</b>" in index
    assert '<summary><b>training:b</b> digest <code>' in index

    again = run_batch(spec(tmp_path, exp), out=io.StringIO())
    assert again.ran == [] and len(again.skipped) == 5

    # one recipe's params change: it alone refuses its old outputs, then with --force reruns with what follows
    exp = params(tmp_path / "params", b_lr=3e-5)
    refused = run_batch(spec(tmp_path, exp), out=io.StringIO())
    assert refused.failed == "training:b" and refused.skipped == ["profiling", "prefixes", "training:a"]
    assert "made with other params" in refused.message
    forced = run_batch(spec(tmp_path, exp, force=True), out=io.StringIO())
    assert forced.ok and forced.ran == ["training:b", "misbehavior_rate"]
    assert forced.skipped == ["profiling", "prefixes", "training:a"]

    # recipe b dropped from the params: the run's recipes say so (its directory stays), and what reads
    # the recipes (the evaluation's `selected`, the cost stage) sees a alone
    (tmp_path / "params" / "exp.yaml").write_text("base: base.yaml\nrecipes: [a.yaml]\n")
    fewer = run_batch(spec(tmp_path, exp), out=io.StringIO())
    assert fewer.ok and fewer.ran == ["misbehavior_rate"]
    assert json.loads((run / "recipes.json").read_text()) == ["a"] and (run / "recipes" / "b").is_dir()


@pytest.mark.slow
def test_an_evaluation_made_while_a_recipe_was_unfinished_runs_again_once_it_finishes(tmp_path, mirl_kernel):
    """The device flow: one call stops recipe b's training at its deadline and evaluates what is there; a
    later call finishes b with the same params. The evaluation must then run again, not be skipped as
    complete with the same params (it was, and b's checkpoint went unevaluated)."""
    pipeline(tmp_path / "nb")
    exp = params(tmp_path / "params")
    run = tmp_path / "runs" / "t"
    assert run_batch(spec(tmp_path, exp), out=io.StringIO()).ok
    # training:b as a deadline leaves it: its summary and the batch's record unfinished, same params
    summary = run / "recipes" / "b" / "training" / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "complete": False}))
    state_path = run / "batch.json"
    st = json.loads(state_path.read_text())
    st["stages"]["training:b"].update(complete=False, status="incomplete")
    state_path.write_text(json.dumps(st))

    def evaluate():
        return run_batch(spec(tmp_path, exp, first="misbehavior_rate", last="misbehavior_rate"), out=io.StringIO())

    assert evaluate().ran == ["misbehavior_rate"]  # what is there now: b unfinished
    assert evaluate().skipped == ["misbehavior_rate"]  # nothing changed since
    finished = run_batch(spec(tmp_path, exp, first="training:b", last="training:b"), out=io.StringIO())
    assert finished.ok and finished.ran == ["training:b"]
    again = evaluate()
    assert again.ok and again.ran == ["misbehavior_rate"], "an evaluation of unfinished training was kept"
    assert evaluate().skipped == ["misbehavior_rate"]


@pytest.mark.slow
def test_recipes_train_at_once_with_parallel_and_a_failure_stops_what_follows(tmp_path, mirl_kernel):
    """--parallel 2: both recipes' trainings run at once (each waits at its first item until the other
    has started its own, which one after another never does), each kernel writing to its own log; one that
    fails lets the other finish and stops the stages after them; the next run trains only the failed one."""
    nb = pipeline(tmp_path / "nb")
    breaks = "\nimport os\nprint('gpu share', os.environ.get('MIRL_GPU_SHARE'))" \
             "\nimport pathlib\nif recipe == 'b' and (pathlib.Path(runs_root).parent / 'break').exists():\n" \
             "    raise RuntimeError('recipe b breaks')"
    write_notebook(nb / "04_training_launch.ipynb", "training",
                   stage_body("training", items=2, reads=("prefixes",), meet=2, meet_s=90) + breaks)
    exp = params(tmp_path / "params")
    run = tmp_path / "runs" / "t"
    (tmp_path / "break").touch()
    out = io.StringIO()
    first = run_batch(spec(tmp_path, exp, parallel=2), out=out)
    assert not first.ok and first.failed == "training:b", out.getvalue()
    assert "recipe b breaks" in first.message and "04_training_launch" in first.message
    assert sorted(first.ran) == ["prefixes", "profiling", "training:a"]
    state = json.loads((run / "batch.json").read_text())["stages"]
    assert state["training:a"]["status"] == "complete" and state["training:b"]["status"] == "failed"
    assert "misbehavior_rate" not in state
    for name in ("a", "b"):  # each kernel's output in its own log
        assert sorted(x for x in calls(run / "recipes" / name) if "done" in x) == ["training done 0", "training done 1"]
        log = (tmp_path / "reports" / "t" / "logs" / f"training-{name}.log").read_text()
        assert "hello from training" in log and log.count("=== ") == 2
        assert "gpu share 0.5" in log  # each of the two sizes its engine's KV pages from half the GPU
    assert "[3/5] 04 training [a]" in out.getvalue() and "[4/5] 04 training [b]  FAILED" in out.getvalue()

    (tmp_path / "break").unlink()
    second = run_batch(spec(tmp_path, exp, parallel=2), out=io.StringIO())
    assert second.ok, second.message
    assert second.ran == ["training:b", "misbehavior_rate"] and "training:a" in second.skipped


@pytest.mark.slow
def test_an_interrupt_stops_recipes_training_at_once_and_the_next_run_resumes_them(tmp_path, mirl_kernel):
    """A deadline's SIGINT to `mirl batch --parallel 2` while both trainings run: the batch exits, no
    kernel of theirs goes on working, and the same command then finishes both without redoing an item."""
    nb = pipeline(tmp_path / "nb")
    write_notebook(nb / "04_training_launch.ipynb", "training",
                   stage_body("training", items=3, reads=("prefixes",), meet=2, hold_at=1))
    exp = params(tmp_path / "params")
    run = tmp_path / "runs" / "t"
    for name in ("a", "b"):
        (run / "recipes" / name).mkdir(parents=True)
        (run / "recipes" / name / "hold").touch()
    cmd = [sys.executable, "-m", "mirl", "batch", "--params", str(exp), "--name", "t", "--notebooks", str(nb),
           "--parallel", "2", "--cell-timeout", "120"]
    env = child_env(mirl_kernel)
    with open(tmp_path / "first.out", "w") as log:
        # under `timeout`, as the device scripts run it: a signal to `timeout` goes to the batch, then to its
        # whole process group (the children running the trainings too, and the batch a second time)
        proc = subprocess.Popen(["timeout", "--signal=INT", "--kill-after=60", "300", *cmd], cwd=tmp_path, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 150
            while not all("training start 1" in calls(run / "recipes" / n) for n in ("a", "b")):
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "first.out").read_text()
                time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
            rc = proc.wait(timeout=90)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    first = (tmp_path / "first.out").read_text()
    assert rc not in (0, 137), first  # stopped by the interrupt, not killed
    assert "Traceback" not in first, first  # nothing of the children's shutdown on the batch's console
    for name in ("a", "b"):
        (run / "recipes" / name / "hold").unlink()
    time.sleep(3)  # a kernel left running would now finish its held item
    for name in ("a", "b"):
        assert "training done 1" not in calls(run / "recipes" / name), "a kernel outlived its batch"
    second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=200)
    assert second.returncode == 0, second.stdout + second.stderr
    for name in ("a", "b"):
        done = sorted(x for x in calls(run / "recipes" / name) if "done" in x)
        assert done == ["training done 0", "training done 1", "training done 2"], done


def test_a_recipe_may_change_only_training(tmp_path):
    pipeline(tmp_path / "nb")
    exp = params(tmp_path / "params")
    (tmp_path / "params" / "b.yaml").write_text("base: base.yaml\ntraining:\n  recipe: b\nprofiling:\n  seeds: 3\n")
    with pytest.raises(ParamsError, match=r"b\.yaml: a recipe may change only training\.\*, but it changes "
                                          r"profiling\.seeds"):
        run_batch(spec(tmp_path, exp), out=io.StringIO())
    assert not (tmp_path / "runs" / "t" / "batch.json").exists()
