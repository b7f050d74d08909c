"""The mask-binding tasks: their memory masks block (group, device) pairs, MaskablePPO never evaluates a
placement that uses one, and PPO (its unmasked ablation) does, so the two are distinct results. On
``cpu-igpu-lowmem`` hardly any placement fits; on ``cpu-igpu-carveout`` the placements the masks allow fit."""

from __future__ import annotations

import numpy as np
import pytest

from agents import make_method
from placement_gym import MASKED_PLATFORMS, MASKED_TASK_PAIRS
from placement_gym.problem import PlacementProblem

TASK = ("resnet50", MASKED_PLATFORMS[0])


@pytest.fixture(scope="module")
def blocked() -> np.ndarray:
    return ~PlacementProblem.make(*TASK).device_mask  # (G, D): True where the group cannot go


def _run(method: str, budget: int = 24, task: tuple[str, str] = TASK) -> list[np.ndarray]:
    """The placements a short run of ``method`` evaluates (seed 0)."""
    return [p for p, _ in _run_feasible(method, budget, task)]


def _run_feasible(method: str, budget: int, task: tuple[str, str]) -> list[tuple[np.ndarray, bool]]:
    """The placements a short run of ``method`` evaluates (seed 0), each with whether it fits."""
    seen: list[tuple[np.ndarray, bool]] = []
    make_method(method, n_steps=8, batch_size=8).place(
        PlacementProblem.make(*task), budget=budget, seed=0,
        listeners=[lambda tracker, placement, latency, ok: seen.append((np.array(placement), ok))],
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


def test_on_the_carveout_task_the_masks_bind_and_every_masked_placement_fits():
    task = ("whisper_tiny", "cpu-igpu-carveout")
    assert task in MASKED_TASK_PAIRS
    blocked = ~PlacementProblem.make(*task).device_mask
    assert blocked.sum() == 4 and blocked[:, 0].sum() == 0  # four groups fit on the CPU only
    masked = _run_feasible("maskable_ppo_gnn", 24, task)
    plain = _run_feasible("ppo_gnn", 24, task)
    assert len(masked) >= 20 and len(plain) >= 20
    assert all(_on_blocked(p, blocked) == 0 and fits for p, fits in masked)  # the masks leave only fits
    assert sum(_on_blocked(p, blocked) > 0 for p, _ in plain) > len(plain) // 2
    assert not all(fits for _, fits in plain)  # PPO's samples use blocked pairs, and those do not fit
