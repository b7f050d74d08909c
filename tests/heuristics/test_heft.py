"""HEFT moved from agents.baselines into placement_gym.heuristics: the same placements, bit for bit."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import placement_gym
from placement_gym.heuristics.common import allowed_devices
from placement_gym.heuristics.heft import heft_placement

# HEFT's placements of tiny_bert before the move (agents.baselines.heft at main 7f850e2), one digit per group
BEFORE = {
    ("cpu-igpu", True): ("0000000000001100000000000000000000000000000000", 9.713771412037037e-05),
    ("cpu-igpu", False): ("0000000100000100000000000000000000000000000000", 0.00010139994646990741),
    ("model-parallel", True): ("0000000010010000002022222222222121111111111102", 0.000444242333715278),
}


def problem(model: str, platform: str):
    env = gym.make(placement_gym.suite_id("bert", platform), model=model, reward="neg_latency_ms")
    return env.unwrapped.problem


@pytest.mark.parametrize("platform, insertion", list(BEFORE))
def test_heft_placements_are_unchanged(platform: str, insertion: bool) -> None:
    p = problem("tiny_bert", platform)
    placement, makespan = heft_placement(p.cost_model(), allowed_devices(p), insertion)
    digits, expected_makespan = BEFORE[(platform, insertion)]
    np.testing.assert_array_equal(placement, [int(c) for c in digits])
    assert makespan == expected_makespan


@pytest.mark.parametrize("platform", placement_gym.SUITE_PLATFORMS)
def test_heft_latency_is_the_one_stored_with_the_optimum(platform: str) -> None:
    """The reference optima store HEFT's simulated latency; the moved HEFT reproduces it exactly."""
    p = problem("resnet50", platform)
    placement, _ = heft_placement(p.cost_model(), allowed_devices(p))
    assert p.evaluate(placement).latency == p.reference.heft_latency


def test_agents_keep_their_names() -> None:
    from agents.baselines import common
    from agents.baselines.heft import HEFT
    from agents.baselines.heft import heft_placement as agents_heft

    assert agents_heft is heft_placement and common.allowed_devices is allowed_devices
    assert HEFT.name == "heft"
