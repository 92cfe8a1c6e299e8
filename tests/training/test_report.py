"""The training curves: whole steps on the x axis, no offset on a near-constant axis, and a panel
without a curve says why (no update when every group was dead) instead of staying blank."""

from __future__ import annotations

from mirl.training.report import curves
from tests.test_reported import assert_readable


def _row(step: int, live: int, **more):
    return {"step": step, "reward": 0.3, "r_o": 0.3, "r_e": 0.5, "groups_live": live, "groups_tried": 3,
            "dead_share": 1 - live / 3, "masked_share": 0.0, "collect_s": 20.0, "sync_s": 0.0, **more}


def _panel(fig, title):
    return next(ax for ax in fig.axes if ax.get_title() == title)


def test_dead_steps_say_no_update_in_the_learner_panels():
    fig = curves([_row(1, 0), _row(2, 0)])
    for title in ("learner", "mismatch"):
        ax = _panel(fig, title)
        assert not ax.lines and "every group was dead" in ax.texts[0].get_text()
    assert _panel(fig, "reward").lines and not _panel(fig, "reward").texts
    assert_readable(fig)


def test_steps_are_whole_and_a_flat_axis_has_no_offset():
    rows = [_row(s, 1, loss=-0.05, entropy=0.4, logprob_abs_diff=1e-6, learner_s=30.0) for s in (1, 2)]
    fig = curves(rows)
    fig.canvas.draw()
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)
        assert ax.yaxis.get_offset_text().get_text() == "", ax.get_title()
    assert not any(ax.texts for ax in fig.axes)


def test_recipe_curves_draw_each_recipe_and_name_one_without_a_step(tmp_path):
    import json

    from mirl.training.report import recipe_curves

    for name, reward in (("mirl", 0.4), ("tmax", 0.1)):
        train = tmp_path / "recipes" / name / "training"
        train.mkdir(parents=True)
        (train / "metrics.jsonl").write_text("".join(json.dumps(_row(s, 1, reward=reward * s)) + "\n" for s in (1, 2, 3)))
    (tmp_path / "recipes" / "outcome-prefix" / "training").mkdir(parents=True)  # not a step yet
    (tmp_path / "recipes.json").write_text('["mirl", "outcome-prefix", "tmax"]')
    fig = recipe_curves(tmp_path)
    reward = _panel(fig, "reward (tests pass and, for mirl, avoided)")
    drawn = {line.get_label(): list(line.get_ydata()) for line in reward.lines}
    assert drawn["mirl"] == [0.4, 0.8, 1.2000000000000002] and drawn["tmax"][0] == 0.1
    assert drawn["outcome-prefix (no step yet)"] == []
    assert [t.get_text() for t in fig.axes[-1].get_legend().get_texts()] == ["mirl", "outcome-prefix (no step yet)", "tmax"]
    assert_readable(fig)
    assert "not measured" in _panel(fig, "silent rollouts (ran no command)").texts[0].get_text()  # no run has it
    # the share of rollouts that ran no command, where the metrics have it (runs from before it: no line)
    metrics = tmp_path / "recipes" / "mirl" / "training" / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({**_row(s, 1), "silent_share": s / 4}) + "\n" for s in (1, 2)))
    silent = _panel(recipe_curves(tmp_path), "silent rollouts (ran no command)")
    assert {line.get_label(): list(line.get_ydata()) for line in silent.lines} == {
        "mirl": [0.25, 0.5], "outcome-prefix (no step yet)": [], "tmax": []}
    empty = recipe_curves(tmp_path / "none")
    assert len(empty.axes) == 1 and "no training recipes" in empty.axes[0].texts[0].get_text()


def _rollout(step, draw, start, reward, live, valid=True, trained=None):
    return {"step": step, "draw": draw, "start": start, "sample": 0, "live": live,
            "trained": live if trained is None else trained,
            "reward": {"r_o": reward > 0, "r_e": True, "reward": reward, "valid": valid}}


def _write_rollouts(tmp_path, rows, tail=""):
    import json

    train = tmp_path / "training"
    train.mkdir(exist_ok=True)
    (train / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


def test_starts_tell_which_starts_could_ever_be_live(tmp_path):
    """Per start: groups, live and trained groups, mean rewards and the live share a group size would
    give. A start whose rollouts all got one reward is not mixed and no group size makes it live; an
    invalid rollout, a row without a reward and a torn last line count for nothing."""
    from mirl.training.report import live_shares, starts, starts_summary

    rows = [_rollout(1, 0, "retry|t/0/1", r, True) for r in (1.0, 0.0, 0.0, 0.0)]  # live group, p = 1/4
    rows += [_rollout(2, 1, "retry|t/0/1", 0.0, False) for _ in range(4)]  # dead group of the same start
    rows += [_rollout(3, 4, "retry|t/0/1", r, True, trained=False) for r in (1.0, 0.0, 1.0, 0.0)]  # surplus
    rows += [_rollout(1, 2, "silent|u/0/3", 1.0, False) for _ in range(4)]  # always passes: never live
    rows += [_rollout(2, 3, "silent|u/0/3", 0.0, False, valid=False)]  # invalid: not counted
    rows += [{"step": 2, "draw": 3, "start": "silent|u/0/3", "live": False, "reward": None}]  # no reward
    _write_rollouts(tmp_path, rows, tail='{"step": 3, "dra')
    df = starts(tmp_path, group_sizes=(4, 16)).set_index("start")
    live = df.loc["retry|t/0/1"]
    assert (live.groups, live.groups_live, live.groups_trained, live.rollouts, live.misbehavior) == (3, 2, 1, 12, "retry")
    assert live.reward == 3 / 12 and live.mixed
    assert abs(live.live_if_group_4 - (1 - 0.25 ** 4 - 0.75 ** 4)) < 1e-12
    assert live.live_if_group_16 > live.live_if_group_4
    dead = df.loc["silent|u/0/3"]
    assert (dead.groups, dead.groups_live, dead.rollouts, bool(dead.mixed)) == (1, 0, 4, False)
    assert dead.live_if_group_4 == 0 and dead.live_if_group_16 == 0
    assert list(df.index) == ["retry|t/0/1", "silent|u/0/3"]  # mixed starts first
    shares = live_shares(df.reset_index())  # weighted by groups drawn: 3 of the live start's, 1 of the other
    assert shares["observed"] == 2 / 4
    assert abs(shares["4"] - 3 / 4 * (1 - 0.25 ** 4 - 0.75 ** 4)) < 1e-12
    line = starts_summary(df.reset_index())
    assert line.startswith("1 of 2 starts ever gave different rewards") and "observed: 0.500" in line
    assert f"groups of 4: {shares['4']:.3f}" in line


def test_starts_with_a_reward_that_is_not_0_or_1_and_without_rollouts(tmp_path):
    """A graded reward anywhere in the run: a mixed start's expected share is unknown (NaN), and so is the
    run's; a start that never varied is 0 whatever its reward. No rollouts: an empty table, no shares."""
    from mirl.training.report import live_shares, starts, starts_summary

    assert starts(tmp_path).empty and live_shares(starts(tmp_path)) == {}
    assert starts_summary(starts(tmp_path)).endswith("no groups yet")
    rows = [_rollout(1, 0, "a|t/0/1", r, True) for r in (0.5, 0.25)]
    rows += [_rollout(1, 1, "b|t/0/2", 0.0, False) for _ in range(2)]
    _write_rollouts(tmp_path, rows)
    df = starts(tmp_path, group_sizes=(8,)).set_index("start")
    assert df.loc["b|t/0/2"].live_if_group_8 == 0.0
    assert df.loc["a|t/0/1"].live_if_group_8 != df.loc["a|t/0/1"].live_if_group_8  # NaN
    shares = live_shares(df.reset_index())
    assert shares["observed"] == 0.5 and shares["8"] != shares["8"]
