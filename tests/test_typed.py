"""The typed builder under every params section: each value checked against its field's type."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from mirl import params as pipeline
from mirl.typed import ParamsError, build


@dataclass
class Tables:
    caps: dict[str, float] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    hardware: dict[str, dict[str, str | int]] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)


def test_mapping_values_are_checked_against_the_fields_value_type():
    t = build(Tables, {"caps": {"profiling": "2.5"}, "steps": {"tmax": 120.0},
                       "hardware": {"training": {"kind": "A100", "count": 8}}, "extra": {"x": [1]}})
    assert t.caps == {"profiling": 2.5} and t.steps == {"tmax": 120}
    assert t.hardware == {"training": {"kind": "A100", "count": 8}}  # 8 stays a number in `str | int`
    with pytest.raises(ParamsError, match=r"caps\['profiling'\]: must be a number, got 'abc'"):
        build(Tables, {"caps": {"profiling": "abc"}})
    with pytest.raises(ParamsError, match=r"steps\['tmax'\]: must be an integer, got 'late'"):
        build(Tables, {"steps": {"tmax": "late"}})
    with pytest.raises(ParamsError, match=r"hardware\['training'\]: must be a mapping"):
        build(Tables, {"hardware": {"training": "A100"}})


@pytest.mark.parametrize("section, values, named", [
    ("models", {"stage_budget_usd": {"profiling": "abc"}}, "models.stage_budget_usd['profiling']"),
    ("models", {"currency_rates": {"EUR": [1]}}, "models.currency_rates['EUR']"),
    ("cost", {"up_to_steps": {"tmax": "late"}}, "cost.up_to_steps['tmax']"),
    ("cost", {"currency_rates": {"EUR": "x"}}, "cost.currency_rates['EUR']"),
])
def test_a_wrong_value_in_a_params_mapping_is_an_error_naming_it(section, values, named):
    """These were kept as given and failed deep inside a stage (a budget compared with a string)."""
    with pytest.raises(ParamsError) as e:
        pipeline.make(**{section: values})
    assert named in str(e.value)


@dataclass
class Ranged:
    count: int = field(default=1, metadata={"help": "a count", "min": 1})
    share: float = field(default=0.5, metadata={"help": "a share", "min": 0, "max": 1})
    timeout_s: float | None = field(default=None, metadata={"help": "a timeout; empty = none", "above": 0})
    caps: dict[str, float] = field(default_factory=dict, metadata={"help": "caps", "min": 0})
    free: int = field(default=0, metadata={"help": "no range"})


@pytest.mark.parametrize("values, message", [
    ({"count": -3}, "count: must be at least 1, got -3"),
    ({"count": 0}, "count: must be at least 1, got 0"),
    ({"share": 1.5}, "share: must be at least 0 and at most 1, got 1.5"),
    ({"share": -0.1}, "share: must be at least 0 and at most 1, got -0.1"),
    ({"share": "nan"}, "share: must be at least 0 and at most 1, got nan"),
    ({"timeout_s": 0}, "timeout_s: must be above 0, got 0.0"),
    ({"caps": {"profiling": -1}}, "caps['profiling']: must be at least 0, got -1.0"),
])
def test_a_value_out_of_its_fields_range_is_an_error_naming_key_value_and_range(values, message):
    with pytest.raises(ParamsError) as e:
        build(Ranged, values)
    assert str(e.value) == message


def test_values_within_range_and_fields_without_one_pass():
    r = build(Ranged, {"count": 1, "share": 0, "timeout_s": None, "caps": {"a": 0}, "free": -5})
    assert (r.count, r.share, r.timeout_s, r.caps, r.free) == (1, 0.0, None, {"a": 0.0}, -5)
    assert build(Ranged, {"share": 1, "timeout_s": 0.5}).share == 1.0


def test_a_nested_sections_range_is_checked_and_named_with_its_section():
    @dataclass
    class Outer:
        inner: Ranged = field(default_factory=Ranged, metadata={"help": "nested"})

    with pytest.raises(ParamsError, match=r"^inner\.count: must be at least 1, got 0$"):
        build(Outer, {"inner": {"count": 0}})


def test_an_override_out_of_range_is_an_error_naming_the_file_and_key(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("profiling: {seeds: 2}\n")
    assert pipeline.load(f, ["profiling.seeds=1"]).profiling.seeds == 1
    with pytest.raises(ParamsError, match=rf"^{f}: profiling.seeds: must be at least 1, got -3$"):
        pipeline.load(f, ["profiling.seeds=-3"])
    f.write_text("profiling: {seeds: -3}\n")
    with pytest.raises(ParamsError, match=rf"^{f}: profiling.seeds: must be at least 1, got -3$"):
        pipeline.load(f)
