"""The rule annotator: the taxonomy from the rule detectors' labels alone (no embedding model)."""

from __future__ import annotations

from mirl.records.error_step import ErrorStep
from mirl.roles.annotator_offline import RuleAnnotator


def test_one_type_per_flagging_detector_and_each_step_labelled_with_its_detectors():
    steps = [
        ErrorStep(env="a", seed=0, step=0, rejected_command="", reason="no command", source="rules:no-runnable-command"),
        ErrorStep(env="a", seed=0, step=1, rejected_command="ls", reason="same again",
                  detectors=["rules:retry-unchanged-after-failure", "rules:no-runnable-command"]),
        ErrorStep(env="b", seed=1, step=2, rejected_command="ls", reason="same again",
                  detectors=["rules:retry-unchanged-after-failure"]),
        ErrorStep(env="c", seed=0, step=0, rejected_command="x", reason="an LLM localizer's flag", source="llm"),
    ]
    types, labels = RuleAnnotator().annotate(steps)
    assert [t.name for t in types] == ["no runnable command", "retry unchanged after failure"]
    assert [t.provenance for t in types] == ["rules: rules:no-runnable-command", "rules: rules:retry-unchanged-after-failure"]
    assert types[0].examples == [steps[0].id, steps[1].id]
    assert types[1].examples == [steps[1].id, steps[2].id]
    by_id = {lb.id: lb.types for lb in labels}
    assert by_id[steps[0].id] == ["no runnable command"]
    assert by_id[steps[1].id] == ["retry unchanged after failure", "no runnable command"]
    assert by_id[steps[2].id] == ["retry unchanged after failure"]
    assert by_id[steps[3].id] == []  # no rule flagged it: no type (the offline annotator would cluster it)
