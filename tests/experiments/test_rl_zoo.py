"""rl-zoo3 trains on our env IDs with the YAML hyperparameters shipped in experiments/hyperparams."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import yaml

import placement_gym

HYPERPARAMS = Path(__file__).resolve().parents[2] / "experiments" / "hyperparams"


def test_yaml_files_cover_the_simulated_ids_and_name_importable_policies():
    import importlib

    for algo in ("ppo", "a2c"):
        conf = yaml.safe_load((HYPERPARAMS / f"{algo}.yml").read_text())
        for model in placement_gym.BENCHMARK_MODELS:
            entry = conf[f"DevicePlacement-{model}-cpu_dgpu_v0-sim-v0"]
            module, cls = entry["policy"].rsplit(".", 1)
            assert hasattr(importlib.import_module(module), cls)


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_yaml_files_are_the_recipe(algo):
    from experiments import zoo_yaml

    assert (HYPERPARAMS / f"{algo}.yml").read_text() == zoo_yaml.text(algo)
    conf = yaml.safe_load((HYPERPARAMS / f"{algo}.yml").read_text())
    ids = placement_gym.ENV_IDS + placement_gym.SEQUENTIAL_IDS + placement_gym.IMPROVE_IDS
    assert set(conf) == {i for i in ids if not gym.spec(i).nondeterministic}  # every simulated ID, old ones too


@pytest.mark.parametrize("prefix", ["DevicePlacement", "DevicePlacementSequential", "DevicePlacementImprove"])
def test_yaml_entry_builds_a_model_as_rl_zoo_does(prefix):
    """rl-zoo3 evaluates ``policy_kwargs``, imports the policy and passes the rest to the algorithm."""
    import gymnasium as gym
    from rl_zoo3.utils import get_class_by_name
    from stable_baselines3 import PPO

    env_id, key = f"{prefix}-v0", f"{prefix}-bert-cpu_igpu-sim-v0"
    entry = dict(yaml.safe_load((HYPERPARAMS / "ppo.yml").read_text())[key])
    env = gym.make(env_id, model="tiny_cnn", platform="cpu-dgpu", backend="simulated", **entry.pop("env_kwargs", {}))
    policy = get_class_by_name(entry.pop("policy"))
    policy_kwargs = eval(entry.pop("policy_kwargs"))  # as rl-zoo3 does
    for key in ("n_envs", "n_timesteps"):
        entry.pop(key)
    model = PPO(policy, env, policy_kwargs=policy_kwargs, seed=0, **entry)
    model.learn(16)
    assert model.num_timesteps >= 16


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "a2c"])  # rl-zoo3 2.9 has no MaskablePPO
def test_rl_zoo_trains(tmp_path, algo):
    cmd = [
        sys.executable,
        "-m",
        "rl_zoo3.train",
        "--algo",
        algo,
        "--env",
        "DevicePlacement-resnet50-cpu_dgpu_v0-sim-v0",
        "--gym-packages",
        "placement_gym",
        "--conf-file",
        str(HYPERPARAMS / f"{algo}.yml"),
        "-n",
        "64",
        "--log-folder",
        str(tmp_path),
        "--eval-freq",
        "-1",
        "--seed",
        "0",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert list(tmp_path.glob(f"{algo}/DevicePlacement-resnet50-cpu_dgpu_v0-sim-v0_*/DevicePlacement-resnet50-cpu_dgpu_v0-sim-v0.zip"))
