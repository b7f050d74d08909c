"""The env factories of a ``SubprocVecEnv``'s worker processes, in a module of their own: a worker imports
this module, not the learners' (whose torch-geometric and policy imports a worker never needs, about
15 s of a new process on a loaded core)."""

from __future__ import annotations

import pickle

import gymnasium as gym
from stable_baselines3.common.monitor import Monitor

from placement_gym.measured.workers import pinned_env


def unpickled_env(blob: bytes) -> gym.Env:
    """A worker process's copy of a pickled env."""
    return Monitor(pickle.loads(blob))


def pinned_monitored_env(blob: bytes, cores: tuple[int, ...]) -> gym.Env:
    """A measuring worker's copy of a pickled env, built after pinning the worker to ``cores``
    (:func:`~placement_gym.measured.workers.pinned_env`)."""
    return Monitor(pinned_env(blob, cores))
