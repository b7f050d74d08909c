"""Gymnasium environments of placement-gym."""

from placement_gym.envs.device_placement import DevicePlacementEnv
from placement_gym.envs.improve import DevicePlacementImproveEnv

__all__ = ["DevicePlacementEnv", "DevicePlacementImproveEnv"]
