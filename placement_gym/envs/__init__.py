"""Gymnasium environments of placement-gym."""

from placement_gym.envs.device_placement import DevicePlacementEnv

__all__ = ["DevicePlacementEnv"]
