"""The common stage runner on a tiny stage: resume by key, redo, lost items, budget stop, params fingerprint."""

from __future__ import annotations

import json
import sys
import threading

import pytest

from mirl.jsonl import read_jsonl
from mirl.llm.errors import BudgetExceeded
from mirl.llm.ledger import open_ledger
from mirl.runner import Item, ParamsMismatch, RunDir, Stage, StageError, run_stage


class Squares(Stage):
    """Item k -> {"k": k, "square": k*k}; items in `fail` raise, those in `bad` record an error."""

    name = "squares"
    records = "squares.jsonl"
    key_fields = ("k",)
    derived = ("total.json",)

    def __init__(self, run_dir, n=6, model="m1", fail=(), bad=(), cost=0.0, budget=0.0, workers=2):
        super().__init__(None, run_dir)
        self.n, self.model, self.fail, self.bad, self.cost, self.budget = n, model, set(fail), set(bad), cost, budget
        self._workers = workers
        self.ran: list[int] = []
        self._lock = threading.Lock()

    @property
    def workers(self):
        return self._workers

    @property
    def budget_usd(self):
        return self.budget

    def fingerprint(self):
        return {"models": {"policy": {"model": self.model}}, "n": self.n}

    def plan(self):
        return [Item((k,), k) for k in range(self.n)]

    def run_item(self, k):
        with self._lock:
            self.ran.append(k)
        if k in self.fail:
            raise RuntimeError(f"worker for {k} died")
        if self.cost:
            ledger = open_ledger(self.run.root)
            if ledger.spent(self.name) >= self.budget > 0:
                raise BudgetExceeded("cap reached", spent_usd=ledger.spent(self.name), cap_usd=self.budget)
            ledger.record(role="policy", stage=self.name, model=self.model, cost_usd=self.cost,
                          input_tokens=10, cached_input_tokens=4, output_tokens=3)
        broke = k in self.bad
        return {"k": k, "square": k * k, "exit_reason": "error" if broke else "done",
                "error": f"sandbox for {k} broke\ntraceback ..." if broke else None}

    def redo(self, record):
        return record.get("exit_reason") == "error"

    def finalize(self, records):
        total = sum(r["square"] for r in records)
        (self.out / "total.json").write_text(json.dumps(total))
        return {"total": total}


def keys(path):
    return [r["k"] for r in read_jsonl(path)[0]]


def test_runs_every_item_once_then_skips_them(tmp_path):
    s = run_stage(Squares(tmp_path), progress=False)
    assert s["planned"] == 6 and s["new"] == 6 and s["complete"] and s["total"] == sum(k * k for k in range(6))
    assert sorted(keys(tmp_path / "squares" / "squares.jsonl")) == list(range(6))
    again = Squares(tmp_path)
    s2 = run_stage(again, progress=False)
    assert again.ran == [] and s2["skipped"] == 6 and s2["new"] == 0
    assert json.loads((tmp_path / "squares" / "summary.json").read_text())["skipped"] == 6


def test_a_stage_warms_up_once_in_the_runners_thread_before_its_items_and_not_when_nothing_runs(tmp_path):
    events = []

    class Warmed(Squares):
        def warm_up(self):
            events.append(("warm", threading.current_thread() is threading.main_thread(), len(self.ran)))

    run_stage(Warmed(tmp_path), progress=False)
    assert events == [("warm", True, 0)]
    run_stage(Warmed(tmp_path), progress=False)  # every item stored: nothing to warm up for
    assert events == [("warm", True, 0)]
    over = Warmed(tmp_path / "over", cost=0.01, budget=0.01)
    open_ledger(over.run.root).record(role="policy", stage=over.name, model="m1", cost_usd=0.02,
                                      input_tokens=1, cached_input_tokens=0, output_tokens=1)
    run_stage(over, progress=False)  # over its budget before the first item: nothing built
    assert events == [("warm", True, 0)] and over.ran == []


def test_an_episode_stage_warms_up_litellm_alone():
    """Not the inputs or the sandbox: step profiling has no sandbox, pass@k reads no trajectories."""
    from mirl.runner.inputs import EpisodeInputs

    class Stage(EpisodeInputs):
        def tasks(self):
            raise AssertionError("tasks read")

        def trajectories(self):
            raise AssertionError("trajectories read")

        def sandbox(self):
            raise AssertionError("sandbox made")

    Stage().warm_up()
    assert "litellm" in sys.modules


def test_lost_items_and_redo_records_run_again_without_duplicates(tmp_path):
    first = Squares(tmp_path, fail={1, 4}, bad={2})
    s = run_stage(first, progress=False)
    assert s["lost"] == 2 and s["new"] == 4 and not s["complete"] and s["errors"] == 1
    assert sorted(keys(first.records_path)) == [0, 2, 3, 5]  # the error record is kept until the rerun
    second = Squares(tmp_path)
    s2 = run_stage(second, progress=False)
    assert sorted(second.ran) == [1, 2, 4] and s2["complete"]
    assert sorted(keys(second.records_path)) == list(range(6))


def test_a_stage_whose_every_item_failed_is_not_complete_and_says_why(tmp_path):
    s = run_stage(Squares(tmp_path, n=3, bad={0, 1, 2}), progress=False)
    assert not s["complete"] and s["errors"] == 3
    assert s["stopped"] == "every item failed (3), most often: sandbox for 0 broke"
    assert not json.loads((tmp_path / "squares" / "summary.json").read_text())["complete"]
    again = run_stage(Squares(tmp_path, n=3, bad={1}), progress=False)  # one error among results: complete
    assert again["complete"] and again["errors"] == 1 and again["new"] == 3


def test_a_policy_whose_every_item_failed_makes_a_comparing_stage_unusable():
    from mirl.runner.stage import all_failed

    def rec(policy, error=None):
        return {"policy": policy, "exit_reason": "error" if error else "step_limit", "error": error}

    broken = [rec("base", "LLMError: beginAllocateToPool") for _ in range(3)] + [rec("mirl"), rec("mirl", "x")]
    assert all_failed(broken) == "every item of policy base failed (3), most often: LLMError: beginAllocateToPool"
    assert all_failed([rec("base", "e"), rec("base"), rec("mirl", "e"), rec("mirl")]) == ""
    assert all_failed([{"k": 1, "exit_reason": "error", "error": "boom"}]) == "every item failed (1), most often: boom"
    assert all_failed([]) == ""


def test_duplicate_and_torn_records_are_cleaned_on_resume(tmp_path):
    stage = Squares(tmp_path)
    stage.out.mkdir(parents=True)
    stage.records_path.write_text('{"k": 0, "square": 0, "error": false}\n{"k": 0, "square": 0, "error": false}\n'
                                  '{"k": 3, "squ')
    run_stage(stage, progress=False)
    assert sorted(stage.ran) == [1, 2, 3, 4, 5]
    assert sorted(keys(stage.records_path)) == list(range(6))


def test_changed_params_are_refused_naming_each_key(tmp_path):
    run_stage(Squares(tmp_path, n=3), progress=False)
    with pytest.raises(ParamsMismatch) as e:
        run_stage(Squares(tmp_path, n=4, model="m2"), progress=False)
    msg = str(e.value)
    assert "models.policy.model: 'm1' -> 'm2'" in msg and "n: 3 -> 4" in msg
    assert "--name" in msg and "--force" in msg
    assert sorted(keys(tmp_path / "squares" / "squares.jsonl")) == [0, 1, 2]  # nothing was touched
    forced = Squares(tmp_path, n=4, model="m2")
    s = run_stage(forced, force=True, progress=False)
    assert sorted(forced.ran) == [0, 1, 2, 3] and s["new"] == 4
    stored = json.loads(RunDir(tmp_path).params("squares").read_text())
    assert stored["fingerprint"]["models.policy.model"] == "m2"


def test_budget_stops_the_stage_and_a_higher_budget_continues(tmp_path):
    s = run_stage(Squares(tmp_path, n=10, cost=1.0, budget=3.0, workers=1), progress=False)
    assert s["stopped"] and "budget" in s["stopped"] and not s["complete"]
    assert s["new"] == 3 and len(keys(tmp_path / "squares" / "squares.jsonl")) == 3
    ledger = open_ledger(tmp_path)
    assert ledger.spent("squares") == 3.0
    more = Squares(tmp_path, n=10, cost=1.0, budget=100.0, workers=1)
    s2 = run_stage(more, progress=False)
    assert s2["complete"] and sorted(more.ran) == list(range(3, 10))
    assert s2["llm"]["policy"]["calls"] == 10 and s2["llm"]["policy"]["cached_input_tokens"] == 40
    assert ledger.spent("squares") == 10.0


def test_budget_raised_inside_an_item_leaves_it_unfinished(tmp_path):
    stage = Squares(tmp_path, n=4, cost=2.0, budget=2.0, workers=2)
    s = run_stage(stage, progress=False)
    assert s["stopped"] and not s["complete"]
    done = keys(stage.records_path)
    assert len(done) == len(set(done)) and set(done) < set(range(4))


def test_a_stage_that_reads_an_unrun_stage_says_so(tmp_path):
    class Later(Squares):
        name = "later"
        reads = ("squares",)

    with pytest.raises(StageError, match="reads the outputs of 'squares'"):
        run_stage(Later(tmp_path), progress=False)
    run_stage(Squares(tmp_path), progress=False)
    s = run_stage(Later(tmp_path), progress=False)
    assert s["complete"]
    stored = json.loads(RunDir(tmp_path).params("later").read_text())["fingerprint"]
    assert stored["inputs.squares"] == json.loads(RunDir(tmp_path).params("squares").read_text())["digest"]


def test_planning_one_key_twice_is_an_error(tmp_path):
    class Twice(Squares):
        def plan(self):
            return [Item((0,), 0), Item((0,), 0)]

    with pytest.raises(StageError, match="same item key twice"):
        run_stage(Twice(tmp_path), progress=False)
