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
