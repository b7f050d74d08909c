"""Seeded torch methods give the same run whatever torch's thread setting and global random state are."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from agents import make_method
from agents.determinism import deterministic_torch
from placement_gym.envs import DevicePlacementEnv


def _run(method: str, ambient_threads: int, **kwargs) -> tuple[list[int], int, dict[str, list]]:
    previous = torch.get_num_threads()
    torch.set_num_threads(ambient_threads)
    random.seed(ambient_threads)  # global state a previous run in the process may have left
    np.random.seed(ambient_threads)
    torch.manual_seed(ambient_threads)
    try:
        env = DevicePlacementEnv("tiny_bert", "multi-accel", "simulated", coarsening="k", k=12)
        agent = make_method(method, **kwargs)
        result = agent.place(env, budget=40, seed=3)
    finally:
        torch.set_num_threads(previous)
    assert torch.get_num_threads() == previous
    weights = {k: v.tolist() for k, v in agent.model.policy.state_dict().items()}  # bit for bit
    return result.placement.tolist(), result.evaluations, weights


@pytest.mark.parametrize("method", ["a2c_gnn", "ppo_gnn"])
def test_sb3_runs_do_not_depend_on_the_thread_setting(method):
    """The initial weights (an MKL QR decomposition) differ in their last bits with the thread count unless
    the whole run, model building included, has one fixed thread count; so do the trained weights."""
    runs = [_run(method, threads, n_steps=8) for threads in (1, 2, 1)]
    assert runs[0] == runs[1] == runs[2]


def test_the_context_restores_threads_and_the_deterministic_flag():
    threads, flag = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    with deterministic_torch(seed=5, threads=1):
        assert torch.get_num_threads() == 1 and torch.are_deterministic_algorithms_enabled()
        drawn = (random.random(), np.random.rand(), torch.rand(1).item())
    assert torch.get_num_threads() == threads and torch.are_deterministic_algorithms_enabled() == flag
    with deterministic_torch(seed=5, threads=1):
        assert (random.random(), np.random.rand(), torch.rand(1).item()) == drawn
