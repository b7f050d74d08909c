"""The placement-independent move sets the improvement env offers (placement_gym.moves.move_sets)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import placement_gym
from placement_gym.moves import SET_KINDS, branch_sets, move_sets, twin_classes


@pytest.fixture(scope="module")
def cost():
    return gym.make(
        placement_gym.suite_id("bert", "multi-accel"), model="tiny_bert"
    ).unwrapped.problem.cost_model()


def test_singles_come_first_and_every_set_is_listed_once(cost) -> None:
    members, kind = move_sets(cost, SET_KINDS)
    g = cost.num_groups
    np.testing.assert_array_equal(members[:g], np.eye(g, dtype=bool))
    assert (kind[:g] == 0).all() and len(np.unique(members, axis=0)) == len(members)
    assert set(kind.tolist()) == {0, 1, 2, 3}


def test_each_kind_is_what_it_says(cost) -> None:
    members, kind = move_sets(cost, SET_KINDS)
    classes = twin_classes(cost)
    for row in members[kind == 1]:  # a whole twin class
        assert len(set(classes[row].tolist())) == 1 and row.sum() == (classes == classes[row][0]).sum()
    for row in members[kind == 2]:  # consecutive groups
        idx = np.flatnonzero(row)
        assert len(idx) in (2, 4, 8) and (np.diff(idx) == 1).all()
    branches = {r.tobytes() for r in branch_sets(cost)}
    assert all(r.tobytes() in branches for r in members[kind == 3])


def test_unknown_kind_is_named(cost) -> None:
    with pytest.raises(ValueError, match="window"):
        move_sets(cost, ("single", "window"))
