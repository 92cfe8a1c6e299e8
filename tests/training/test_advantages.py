"""Centered group advantages, infrastructure failures left out of the group statistics, and the
refill of dead groups, against batches worked out by hand."""

from __future__ import annotations

import pytest

from mirl.training.advantages import Group, batch_advantages, fill_batch, group_advantages, is_dead


def g(name, rewards, valid=None):
    return Group(name, tuple(rewards), tuple(valid if valid is not None else [True] * len(rewards)))


def test_advantages_are_rewards_minus_the_group_mean():
    # mean of (1, 0, 0, 1, 1) is 0.6
    assert group_advantages([1, 0, 0, 1, 1]) == pytest.approx([0.4, -0.6, -0.6, 0.4, 0.4])
    # not divided by the standard deviation: (3, 1) -> mean 2 -> (+1, -1)
    assert group_advantages([3.0, 1.0]) == pytest.approx([1.0, -1.0])


def test_infrastructure_failures_are_left_out_of_the_mean_and_get_zero():
    # valid rewards (1, 0, 1) -> mean 2/3; scoring the two failures 0 would give mean 0.4 instead
    adv = group_advantages([1, 0, 0, 1, 0], [True, True, False, True, False])
    assert adv == pytest.approx([1 / 3, -2 / 3, 0.0, 1 / 3, 0.0])
    # a failed rollout's stored reward does not leak into the mean
    assert group_advantages([1, 0, 7], [True, True, False]) == pytest.approx([0.5, -0.5, 0.0])
    assert group_advantages([1, 0], [False, False]) == [0.0, 0.0]


def test_dead_groups():
    assert is_dead(g("a", [1, 1, 1, 1]))
    assert is_dead(g("b", [0.0, 0.0]))
    assert not is_dead(g("c", [1, 0, 1]))
    # equal among the valid rollouts: dead even though a failed one stores another number
    assert is_dead(g("d", [1, 0, 1], [True, False, True]))
    # fewer than two valid rollouts
    assert is_dead(g("e", [1, 0], [True, False]))
    assert is_dead(g("f", [1], [True]))
    assert is_dead(g("z", [1, 0], [False, False]))  # every rollout lost to the infrastructure
    # spread among the valid rollouts keeps a group alive whatever the failed one stores
    assert not is_dead(g("h", [1, 0, 0], [True, True, False]))


def test_fill_drops_dead_groups_and_refills_until_full():
    drawn = []

    def source():
        for i, rewards in enumerate([[1, 1], [1, 0], [0, 0], [0, 1], [1, 0], [0, 1]]):
            drawn.append(i)
            yield g(f"p{i}", rewards)

    filled = fill_batch(source(), batch_size=3, max_tries=10)
    assert [x.prefix_id for x in filled.groups] == ["p1", "p3", "p4"]
    assert (filled.tried, filled.dead, filled.full) == (5, 2, True)
    assert filled.dead_share == pytest.approx(2 / 5)
    assert drawn == [0, 1, 2, 3, 4]  # nothing drawn past the group that filled the batch


def test_fill_stops_at_the_cap_on_tries():
    groups = [g("a", [1, 1]), g("b", [0, 1]), g("c", [0, 0]), g("d", [1, 1]), g("e", [1, 0])]
    filled = fill_batch(iter(groups), batch_size=3, max_tries=4)
    assert [x.prefix_id for x in filled.groups] == ["b"]
    assert (filled.tried, filled.dead, filled.full) == (4, 3, False)
    assert filled.dead_share == pytest.approx(3 / 4)


def test_fill_counts_groups_dead_only_through_infrastructure_failures():
    groups = [g("a", [1, 0], [True, False]), g("b", [1, 0, 0], [True, True, False])]
    filled = fill_batch(groups, batch_size=1, max_tries=2)
    assert [x.prefix_id for x in filled.groups] == ["b"] and filled.dead_share == pytest.approx(0.5)


def test_fill_ends_when_the_source_runs_out():
    filled = fill_batch([g("a", [1, 0])], batch_size=8, max_tries=32)
    assert (len(filled.groups), filled.tried, filled.full) == (1, 1, False)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="batch_size"):
        fill_batch([], batch_size=0)
    with pytest.raises(ValueError, match="max_tries"):
        fill_batch([], batch_size=8, max_tries=4)
    with pytest.raises(ValueError, match="2 rewards but 3 validity flags"):
        g("x", [1, 0], [True, True, False])


def test_batch_advantages_flatten_groups_and_keep_failures_out_of_the_loss():
    adv, train = batch_advantages([g("a", [1, 0], [True, True]), g("b", [2, 0, 1], [True, False, True])])
    assert adv == pytest.approx([0.5, -0.5, 0.5, 0.0, -0.5])
    assert train == [True, True, True, False, True]
