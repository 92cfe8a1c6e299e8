"""The evaluation statistics are pure: importing every module of mirl.evaluation pulls in no other
mirl package (no model client, no sandbox), so they run on plain records anywhere."""

from __future__ import annotations

from tests.test_layers import pulled_in


def test_evaluation_pulls_in_no_other_mirl_package():
    assert pulled_in("mirl.evaluation") == {"evaluation"}
