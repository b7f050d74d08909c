"""The padding memory estimate against measured peaks (placement_gym.envs.observation.padded_bytes)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from placement_gym.envs import DevicePlacementEnv
from placement_gym.envs.improve import DevicePlacementImproveEnv
from placement_gym.envs.observation import padded_bytes
from placement_gym.errors import ConfigError
from placement_gym.problem import PlacementProblem

PAD = 30_000  # padded nodes or edges: large enough that the padding dominates the peak


@pytest.fixture(scope="module", params=["cpu-dgpu", "multi-accel"])
def problem(request) -> PlacementProblem:
    p = PlacementProblem.make("tiny_cnn", request.param, "simulated")
    p.has_baseline, p.features, p.device_features  # computed before measuring: not padding
    return p


KINDS = {
    "one-shot graph": (DevicePlacementEnv, {"observation": "graph"}, False, False),
    "one-shot device": (DevicePlacementEnv, {"observation": "device"}, True, False),
    "improvement": (DevicePlacementImproveEnv, {}, True, True),
}


def _peak(problem: PlacementProblem, cls, kwargs: dict, padding: dict) -> int:
    tracemalloc.start()
    try:
        env = cls(problem=problem, **kwargs, **padding)
        env.reset(seed=0)
        if cls is DevicePlacementImproveEnv:
            env.step(int(np.flatnonzero(env.action_masks())[0]))
        else:
            env.step(np.zeros(env.action_space.shape, dtype=np.int64))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("axis", ["max_nodes", "max_edges"])
def test_the_estimate_bounds_the_measured_peak_within_1_5x(problem, kind: str, axis: str) -> None:
    cls, kwargs, device, improve = KINDS[kind]
    node, edge = padded_bytes(problem.num_devices, device, improve)
    per_item = _peak(problem, cls, kwargs, {axis: PAD}) / PAD
    estimate = node if axis == "max_nodes" else edge
    assert per_item <= estimate <= 1.5 * per_item, (kind, axis, per_item, estimate)


def test_a_padding_that_would_not_fit_is_refused_before_allocating(problem) -> None:
    with pytest.raises(ConfigError, match="max_nodes|observations"):
        DevicePlacementImproveEnv(problem=problem, max_nodes=10**12)
