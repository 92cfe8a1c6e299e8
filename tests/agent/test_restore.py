from agent_doubles import FakeSession

from mirl.agent.restore import normalize_output, restore_prefix
from mirl.records.trajectory import Step
from mirl.sandbox.base import CommandResult


def test_normalize_masks_volatile_parts_only():
    a = "built in 0.52s at 2024-01-01T10:00:00Z pid=4242 /tmp/tmpab12cd commit 3f9a2b1c \x1b[32mok\x1b[0m  \n"
    b = "built in 1.7s at 2025-06-30 23:59:59 pid=17 /tmp/tmpzz99 commit 9e8d7c6b5 ok\n"
    assert normalize_output(a) == normalize_output(b)
    assert normalize_output("3 files\n") != normalize_output("4 files\n")
    assert normalize_output("1234567 bytes") != normalize_output("7654321 bytes")  # plain numbers are kept


def test_restore_reports_per_step_and_keeps_recorded_outputs(task):
    outputs = {"a": CommandResult("x\n", 0, 0.01), "b": CommandResult("took 3ms\n", 0, 0.01),
               "c": CommandResult("x\n", 1, 0.01)}
    session = FakeSession(task, respond=lambda c: outputs[c])
    prefix = [Step("", "a", output="x\n", exit_code=0), Step("", "b", output="took 5ms\n", exit_code=0),
              Step("", "c", output="x\n", exit_code=0, source="teacher")]
    steps, report = restore_prefix(session, prefix)
    assert [(s["exact"], s["normalized"]) for s in report.steps] == [(True, True), (False, True), (False, False)]
    assert report.summary() == {"n": 3, "exact": False, "normalized": False, "exact_steps": 1,
                                "normalized_steps": 2, "first_mismatch": 2}
    assert [s.output for s in steps] == ["x\n", "took 5ms\n", "x\n"]
    assert steps[2].meta["prefix_source"] == "teacher" and steps[2].meta["restore"]["exit_code"] == 1
    assert all(s.source == "prefix" for s in steps) and prefix[0].source == "policy"  # input untouched
