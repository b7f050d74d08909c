"""Env and problem input (issue #25): actions and placements that are not plainly integer device indices, and
padding sizes that are not integers or would not fit in memory, are refused naming the problem."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import ConfigError, PlacementError
from placement_gym.validation import as_index_array, padding_size

SIM = ("tiny_cnn", "cpu-dgpu", "simulated")


@pytest.fixture(scope="module")
def env() -> DevicePlacementEnv:
    return DevicePlacementEnv(*SIM)


def _bad_actions(g: int) -> list[tuple[object, str]]:
    return [
        (np.ones(g, dtype=bool), "booleans"),
        ([True] * g, "booleans"),
        ([[0, 1], [0]], "rectangular"),
        ([0, [1]] + [0] * (g - 2), "rectangular"),
        (np.full(g, 0.5), "floats are not accepted"),
        (np.zeros(g), "floats are not accepted"),  # integral floats too: no silent cast
        ([float("nan")] * g, "floats"),
        (np.zeros(g, dtype=complex), "floats"),
        (["0"] * g, "integer indices"),
        (None, "integer indices"),
        ({}, "integer indices"),
        ([2**70] * g, "out of range"),
        (np.full(g, 2**64 - 1, dtype=np.uint64), "out of range"),
        (np.zeros((g, 2), dtype=np.int64), "shape"),
        (np.zeros(g + 1, dtype=np.int64), "shape"),
        (0, "shape"),
        ([-1] * g, "out of range"),
        ([2] * g, "out of range"),
    ]


def test_a_bad_oneshot_action_is_refused_naming_the_problem(env) -> None:
    for action, message in _bad_actions(env.num_groups):
        env.reset(seed=0)
        with pytest.raises(PlacementError, match=message):
            env.step(action)


def test_the_problem_refuses_the_same_placements(env) -> None:
    problem = env.problem
    for placement, message in _bad_actions(problem.num_groups):
        with pytest.raises(PlacementError, match=message):
            problem.validate(placement)
        with pytest.raises(PlacementError):
            problem.evaluate_batch([placement, placement] if not isinstance(placement, dict) else placement)


def test_plain_integer_actions_of_any_integer_dtype_are_accepted(env) -> None:
    g = env.num_groups
    for action in ([0] * g, np.zeros(g, np.int8), np.ones(g, np.uint64), np.zeros(g, np.int32)):
        env.reset(seed=0)
        assert env.step(action)[2]


def test_sequential_actions_are_one_integer() -> None:
    env = DevicePlacementEnv(*SIM, mode="sequential")
    for action, message in ((True, "booleans"), (1.0, "floats"), ([0, [1]], "rectangular"), ("1", "integer")):
        env.reset(seed=0)
        with pytest.raises(PlacementError, match=message):
            env.step(action)
    env.reset(seed=0)
    env.step(np.int64(1))
    env.step([0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_nodes": 57.5}, "max_nodes must be an integer, got 57.5"),
        ({"max_nodes": True}, "max_nodes must be an integer"),
        ({"max_nodes": "64"}, "max_nodes must be an integer"),
        ({"max_nodes": 3}, "smaller than the graph"),
        ({"max_nodes": 10**10}, r"max_nodes=10000000000 needs at least \d+\.\d TiB of memory"),
        ({"max_edges": 10**10}, "max_edges=10000000000 needs at least"),
        ({"max_edges": 7.0}, "max_edges must be an integer"),
    ],
)
def test_padding_sizes_are_integers_that_fit(kwargs, message) -> None:
    with pytest.raises(ConfigError, match=message):
        DevicePlacementEnv(*SIM, **kwargs)


def test_other_env_arguments_that_are_not_names_are_refused() -> None:
    from placement_gym.errors import UnknownNameError

    for value in (np.zeros(8, dtype=bool), np.zeros(8), [[0], [0, 1]], 3):
        with pytest.raises(UnknownNameError, match="unknown initial placement"):
            DevicePlacementEnv(*SIM, initial_placement=value)


def test_a_batch_too_large_to_convert_is_refused_with_the_figure(env) -> None:
    huge = np.broadcast_to(np.zeros(1, np.int8), (10**11, env.num_groups))  # no memory of its own
    with pytest.raises(ConfigError, match="needs at least"):
        env.problem.validate_batch(huge)
    with pytest.raises(PlacementError, match=r"shape \(B, "):  # an empty list is no (B, G) batch
        env.problem.validate_batch([])


def test_padding_accepts_numpy_integers() -> None:
    env = DevicePlacementEnv(*SIM, max_nodes=np.int64(64), max_edges=64)
    assert env.observation_space["node_mask"].shape == (64,)
    assert padding_size(np.int32(9), "n", 8, 4) == 9


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.one_of(st.integers(), st.floats(), st.booleans(), st.text(max_size=3), st.none()),
        lambda inner: st.lists(inner, max_size=4),
        max_leaves=12,
    )
)
def test_as_index_array_returns_int64_or_refuses(values) -> None:
    try:
        arr = as_index_array(values, high=4)
    except PlacementError:
        return
    assert arr.dtype == np.int64 and (arr.size == 0 or (arr.min() >= 0 and arr.max() < 4))
