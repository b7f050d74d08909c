"""The mask-binding task (``cpu-igpu-lowmem``): its memory masks block (group, device) pairs, MaskablePPO never
evaluates a placement that uses one, and PPO (its unmasked ablation) does, so the two are distinct results."""

from __future__ import annotations

import numpy as np
import pytest

from agents import make_method
from placement_gym import MASKED_PLATFORMS
from placement_gym.problem import PlacementProblem

TASK = ("resnet50", MASKED_PLATFORMS[0])


@pytest.fixture(scope="module")
def blocked() -> np.ndarray:
    return ~PlacementProblem.make(*TASK).device_mask  # (G, D): True where the group cannot go


def _run(method: str, budget: int = 24) -> list[np.ndarray]:
    """The placements a short run of ``method`` evaluates (seed 0)."""
    seen: list[np.ndarray] = []
    make_method(method, n_steps=8, batch_size=8).place(
        PlacementProblem.make(*TASK), budget=budget, seed=0,
        listeners=[lambda tracker, placement, latency, feasible: seen.append(np.array(placement))],
    )  # fmt: skip
    return seen


def _on_blocked(placement: np.ndarray, blocked: np.ndarray) -> int:
    return int(blocked[np.arange(len(placement)), placement].sum())


def test_the_masks_bind_on_every_model_of_the_task():
    for model in ("inception_v3", "resnet50", "bert"):
        assert (~PlacementProblem.make(model, TASK[1]).device_mask).sum() >= 1


def test_maskable_ppo_never_uses_a_blocked_pair_and_ppo_does(blocked):
    assert blocked.sum() == 8  # the 8 largest ResNet-50 groups do not fit the iGPU
    masked = _run("maskable_ppo_gnn")
    plain = _run("ppo_gnn")
    assert len(masked) >= 20 and len(plain) >= 20
    assert all(_on_blocked(p, blocked) == 0 for p in masked)
    assert np.mean([_on_blocked(p, blocked) for p in plain]) > 1
    assert {p.tobytes() for p in masked} != {p.tobytes() for p in plain}  # they sample different placements
