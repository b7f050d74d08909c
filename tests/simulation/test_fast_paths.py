"""The simulator's shortcuts (no memory check where nothing can overflow, no subgraph bookkeeping without
invoke overheads, no contention loop without contention) give the same latencies, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from placement_gym.problem import PlacementProblem
from placement_gym.simulation.schedule import _simulate


@pytest.mark.parametrize(
    "model, platform",
    [
        ("tiny_bert", "cpu-dgpu"),
        ("tiny_bert", "multi-accel"),
        ("tiny_cnn", "model-parallel"),
        ("resnet50", "cpu-igpu"),
    ],
)
def test_shortcuts_change_no_latency(model: str, platform: str) -> None:
    schedule = PlacementProblem.make(model, platform, "simulated").backend.schedule
    args = schedule._args()
    full = (*args[:-3], True, True, True)  # every check and loop on
    rng = np.random.default_rng(0)
    g, d = schedule.cost.num_groups, schedule.cost.num_devices
    placements = rng.integers(0, d, size=(300, g))
    placements[:100] = np.where(rng.random((100, g)) < 0.9, 0, placements[:100])
    for p in placements:
        assert schedule.run(p) == _simulate(p, *full)
    lat, over, peak = schedule.run_batch(placements)
    assert [(a, b, c) for a, b, c in zip(lat, over, peak)] == [_simulate(p, *full) for p in placements]


def test_shortcuts_are_taken_only_when_exact() -> None:
    """The memory bound holds on cpu-dgpu (16 GiB devices) and not on model-parallel (a fraction of the weights)."""
    for platform, can_overflow in (("cpu-dgpu", False), ("model-parallel", True)):
        problem = PlacementProblem.make("tiny_bert", platform, "simulated")
        assert problem.backend.schedule.memory_can_overflow is can_overflow
