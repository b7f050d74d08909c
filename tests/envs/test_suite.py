"""The simulated IDs and the task suite: registration, versions, check_env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import placement_gym
from placement_gym.errors import PlacementError
from placement_gym.zoo import BENCHMARK_MODELS

SIMULATED = [i for i in placement_gym.ENV_IDS if not gym.spec(i).nondeterministic and i not in placement_gym.ALIASES]
#: The sequential MDP's IDs, one per platform (with the tiny model swapped in, the platform is what differs).
SEQUENTIAL = list({gym.spec(i).kwargs["platform"]: i for i in placement_gym.SEQUENTIAL_IDS[1:]}.values())


def test_every_model_has_every_version_and_suite_task() -> None:
    for model in BENCHMARK_MODELS:
        for version, platform in placement_gym.SIM_PLATFORM_VERSIONS.items():
            assert gym.spec(f"DevicePlacementSim-{model}-v{version}").kwargs["platform"] == platform
        for platform in placement_gym.SUITE_PLATFORMS:
            spec = gym.spec(placement_gym.suite_id(model, platform))
            assert spec.kwargs == {"model": model, "platform": platform, "backend": "simulated"}
    assert placement_gym.suite_id("bert", "cpu-igpu") == "DevicePlacement-bert-cpu_igpu-sim-v0"
    assert placement_gym.SIM_PLATFORM_VERSIONS[0] == "cpu-dgpu-v0"


@pytest.mark.parametrize("env_id", SIMULATED + SEQUENTIAL)
def test_check_env_simulated_ids_on_tiny_model(env_id: str) -> None:
    """Every simulated ID passes both checkers, with the tiny model swapped in for speed (on model-parallel,
    whose baseline is stored for the zoo models only, with the latency reward, which needs no baseline)."""
    extra = {"reward": "neg_latency_ms"} if "model_parallel" in env_id else {}
    env = gym.make(env_id, model="tiny_cnn", **extra)
    gym_check_env(env.unwrapped)
    sb3_check_env(env.unwrapped, warn=False)
    env.close()


@pytest.mark.slow
@pytest.mark.parametrize("env_id", [i for i in SIMULATED if "-sim-" in i and "cpu_dgpu_v0" not in i])
def test_check_env_new_ids(env_id: str) -> None:
    env = gym.make(env_id)
    gym_check_env(env.unwrapped)
    sb3_check_env(env.unwrapped, warn=False)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(env.action_space.sample())
    assert info["baseline_latency"] > 0 and np.isfinite(reward)


def test_v0_keeps_the_first_calibration() -> None:
    """``-v0`` and ``-v1`` differ only in the platform's calibration; ``-v0``'s GPU is the old, faster one."""
    old = gym.make("DevicePlacementSim-resnet50-v0", model="tiny_cnn").unwrapped
    new = gym.make("DevicePlacementSim-resnet50-v1", model="tiny_cnn").unwrapped
    assert old.problem.platform.name == "cpu-dgpu-v0" and new.problem.platform.name == "cpu-dgpu"
    gpu_old, gpu_new = old.problem.platform.devices[1], new.problem.platform.devices[1]
    assert gpu_old.op_efficiency["MatMul"] == 0.08 and gpu_new.op_efficiency["MatMul"] < 0.08
    gpu_only = np.ones(old.num_groups, dtype=np.int64)
    assert old.problem.evaluate(gpu_only).latency < new.problem.evaluate(gpu_only).latency


def test_model_parallel_without_a_stored_baseline_names_the_fix() -> None:
    """No single device holds the model and no split is stored for it: the speedup rewards say what to use."""
    problem = gym.make(placement_gym.suite_id("bert", "model-parallel"), model="tiny_cnn").unwrapped.problem
    assert not problem.has_baseline
    with pytest.raises(PlacementError, match="out of memory.*neg_latency_ms"):
        _ = problem.baseline
