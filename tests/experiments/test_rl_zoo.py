"""rl-zoo3 trains on our env IDs with the YAML hyperparameters shipped in experiments/hyperparams."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import placement_gym

HYPERPARAMS = Path(__file__).resolve().parents[2] / "experiments" / "hyperparams"


def test_yaml_files_cover_the_simulated_ids_and_name_importable_policies():
    import importlib

    for algo in ("ppo", "a2c"):
        conf = yaml.safe_load((HYPERPARAMS / f"{algo}.yml").read_text())
        for model in placement_gym.BENCHMARK_MODELS:
            entry = conf[f"DevicePlacementSim-{model}-v0"]
            module, cls = entry["policy"].rsplit(".", 1)
            assert hasattr(importlib.import_module(module), cls)


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
        "DevicePlacementSim-resnet50-v0",
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
    assert list(tmp_path.glob(f"{algo}/DevicePlacementSim-resnet50-v0_*/DevicePlacementSim-resnet50-v0.zip"))
