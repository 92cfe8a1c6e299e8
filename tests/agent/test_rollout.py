import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from agent_doubles import SUBMIT, FakeSandbox, Scripted, bash, make_task

from mirl.agent.rollout import RolloutConfig, RolloutError, load_tasks, run_rollouts
from mirl.jsonl import read_jsonl
from mirl.records.trajectory import steps_frame, trajectories_frame

HERE = Path(__file__).parent
REPO = HERE.parents[1]


def _tasks(tmp_path, n=3):
    return [make_task(tmp_path, f"task{i}") for i in range(n)]


def _config(tmp_path, **kw):
    return RolloutConfig(out=str(tmp_path / "run"), progress=False, **kw)


def _script():
    return Scripted(lambda msgs: SUBMIT if len(msgs) > 3 else bash("ls"))


def test_all_pairs_played_once_and_rerun_skips(tmp_path):
    cfg = _config(tmp_path, seeds=2, workers=3)
    tasks = _tasks(tmp_path)
    res = run_rollouts(cfg, tasks=tasks, model=_script(), sandbox=FakeSandbox())
    assert res.summary()["played"] == 6 and res.skipped == 0
    keys = sorted((r["task"], r["seed"]) for r in read_jsonl(res.path)[0])
    assert keys == [(f"task{i}", s) for i in range(3) for s in (0, 1)]
    again = run_rollouts(cfg, tasks=tasks, model=_script(), sandbox=FakeSandbox())
    assert again.skipped == 6 and again.new == []
    assert len(read_jsonl(res.path)[0]) == 6
    df = trajectories_frame(res.path)
    assert len(df) == 6 and set(df.exit_reason) == {"submitted"} and (df.reward == 1.0).all()
    assert len(steps_frame(res.path)) == 12
    assert json.loads((tmp_path / "run" / "rollout_config.json").read_text())["seeds"] == 2


def test_torn_last_record_is_replayed_without_duplicates(tmp_path):
    cfg = _config(tmp_path, seeds=2, workers=2)
    tasks = _tasks(tmp_path, 2)
    res = run_rollouts(cfg, tasks=tasks, model=_script(), sandbox=FakeSandbox())
    data = res.path.read_bytes()
    lines = data.splitlines(keepends=True)
    last_key = (json.loads(lines[-1])["task"], json.loads(lines[-1])["seed"])
    res.path.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # killed mid-write
    again = run_rollouts(cfg, tasks=tasks, model=_script(), sandbox=FakeSandbox())
    assert [(t.task, t.seed) for t in again.new] == [last_key]
    records, report = read_jsonl(res.path)
    assert report.clean and len(records) == 4 and len({(r["task"], r["seed"]) for r in records}) == 4


def test_retry_errors_replaces_error_records(tmp_path):
    class Flaky:
        name = "flaky"

        def __init__(self, fail):
            self.fail = fail

        def complete(self, messages, n=1, **kw):
            if self.fail:
                raise ConnectionError("down")
            return _script().complete(messages, n, **kw)

    cfg = _config(tmp_path, seeds=1)
    tasks = _tasks(tmp_path, 2)
    first = run_rollouts(cfg, tasks=tasks, model=Flaky(True), sandbox=FakeSandbox())
    assert {t.exit_reason for t in first.new} == {"error"}
    # every episode failed: said, with how to play them again
    assert first.stopped.startswith("every item failed (2)") and "--retry-errors" in first.summary()["stopped"]
    assert run_rollouts(cfg, tasks=tasks, model=Flaky(False), sandbox=FakeSandbox()).new == []  # errors count as done
    cfg.retry_errors = True
    retried = run_rollouts(cfg, tasks=tasks, model=Flaky(False), sandbox=FakeSandbox())
    assert len(retried.new) == 2
    records = read_jsonl(first.path)[0]
    assert len(records) == 2 and {r["exit_reason"] for r in records} == {"submitted"}


def test_hook_factory_gives_each_episode_its_own_hook(tmp_path):
    made = []

    class Count:
        def __init__(self):
            self.n = 0
            made.append(self)

        def review(self, ctx):
            self.n += 1
            return ctx.proposed

    run_rollouts(_config(tmp_path, seeds=2), tasks=_tasks(tmp_path, 2), model=_script(), sandbox=FakeSandbox(),
                 hook_factory=Count)
    assert len(made) == 4 and all(h.n == 2 for h in made)


def test_bad_task_paths_give_clear_errors(tmp_path):
    with pytest.raises(RolloutError, match="no such task path"):
        load_tasks(RolloutConfig(tasks=[str(tmp_path / "nope")]))
    with pytest.raises(RolloutError, match="no task directories"):
        load_tasks(RolloutConfig(tasks=[str(tmp_path)]))


def test_a_pool_entry_that_holds_no_task_is_an_error_not_left_out(tmp_path):
    """A pool of good tasks plus a folder with none (a typo, a task.toml misnamed) ran on the good ones alone."""
    (tmp_path / "my-task").mkdir()
    (tmp_path / "my-task" / "Task.toml").write_text('version = "1.0"\n')
    with pytest.raises(RolloutError, match=rf"no task directories found in {tmp_path / 'my-task'} "):
        load_tasks(RolloutConfig(tasks=[str(REPO / "tasks" / "count-lines"), str(tmp_path / "my-task")]))


def test_a_pool_entry_with_a_bang_leaves_that_task_out(tmp_path):
    all_ids = {t.id for t in load_tasks(RolloutConfig(tasks=[str(REPO / "tasks")]))}
    kept = load_tasks(RolloutConfig(tasks=[str(REPO / "tasks"), "!sqlite-top-customers", "!count-lines"]))
    assert {t.id for t in kept} == all_ids - {"sqlite-top-customers", "count-lines"}
    with pytest.raises(RolloutError, match="to leave out not found under .*: no-such-task"):
        load_tasks(RolloutConfig(tasks=[str(REPO / "tasks"), "!no-such-task"]))
    with pytest.raises(RolloutError, match=r"no task directories .* \(leaving out count-lines\)"):
        load_tasks(RolloutConfig(tasks=[str(REPO / "tasks" / "count-lines"), "!count-lines"]))


def test_ray_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as where it is not installed
    cfg = _config(tmp_path, ray_address="auto")
    with pytest.raises(RolloutError, match="pip install 'mirl\\[ray\\]'"):
        run_rollouts(cfg, tasks=_tasks(tmp_path, 1))


def test_kill_and_resume(tmp_path):
    """A run killed with SIGKILL mid-way resumes: no pair lost, none duplicated."""
    out = tmp_path / "run"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        from agent_doubles import FakeSandbox, Scripted, SUBMIT, bash, make_task
        from mirl.agent.rollout import RolloutConfig, run_rollouts
        from pathlib import Path
        tasks = [make_task(Path({str(tmp_path)!r}), f"task{{i}}") for i in range(6)]
        model = Scripted(lambda m: SUBMIT if len(m) > 3 else bash("ls"))
        cfg = RolloutConfig(out={str(out)!r}, seeds=2, workers=2, progress=False)
        run_rollouts(cfg, tasks=tasks, model=model, sandbox=FakeSandbox(delay_s=float(sys.argv[1])))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script, "0.15"], cwd=str(HERE.parent.parent))
    path = out / "trajectories.jsonl"
    deadline = time.time() + 30
    while time.time() < deadline and (not path.exists() or len(read_jsonl(path)[0]) < 3):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = len(read_jsonl(path)[0])
    assert 3 <= before < 12
    subprocess.run([sys.executable, "-c", script, "0"], cwd=str(HERE.parent.parent), check=True, timeout=60)
    records, report = read_jsonl(path)
    keys = [(r["task"], r["seed"]) for r in records]
    assert report.clean and len(keys) == 12 and len(set(keys)) == 12
