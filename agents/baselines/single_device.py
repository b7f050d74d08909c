"""Single-device placement: every group on one device (the CPU-only / GPU-only baselines of HSDAG,
Duan et al., NeurIPS 2024).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from agents.base import BudgetTracker, PlacementMethod
from placement_gym.errors import PlacementError
from placement_gym.problem import PlacementProblem


class SingleDevice(PlacementMethod):
    """All groups on one device.

    Args:
        device: Device name (``"cpu"``) or index; ``None`` evaluates every device and keeps the fastest
            (``D`` evaluations, fewer if the budget is smaller).
    """

    name = "single_device"

    def __init__(self, device: str | int | None = None) -> None:
        self.device = device

    def _device_index(self, problem: PlacementProblem) -> int:
        platform = problem.platform
        if isinstance(self.device, str):
            return platform.device_index(self.device)
        names = [dev.name for dev in platform.devices]
        index = int(self.device)  # type: ignore[arg-type]
        if not 0 <= index < len(names):
            raise PlacementError(f"device index {index} out of range [0, {len(names)}) (devices: {names})")
        return index

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        problem = tracker.problem
        devices = np.arange(problem.num_devices) if self.device is None else [self._device_index(problem)]
        singles = np.repeat(np.asarray(devices, dtype=np.int64)[:, None], problem.num_groups, axis=1)  # (k, G)
        evaluations = tracker.evaluate_batch(singles)
        return {
            "device_latencies": {
                problem.platform.devices[int(d)].name: e.latency for d, e in zip(devices, evaluations)
            }
        }
