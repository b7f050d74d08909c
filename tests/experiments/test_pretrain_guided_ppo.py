"""experiments.pretraining.guided_ppo: a tiny run trains, resumes, and ships policies the method reads."""

from __future__ import annotations

import json

import numpy as np

from agents import make_method
from agents.sb3.guided_ppo import METHOD
from agents.sb3.policy_file import read_transfer_policy
from experiments.pretraining import guided_ppo as pretrain_guided_ppo
from placement_gym.problem import PlacementProblem
from tests.doc_checks import absolute_paths

TINY = ["--models", "tiny_cnn", "--platforms", "cpu-igpu", "multi-accel", "--variants", "1", "--budget", "24",
        "--rounds", "2", "--epochs", "1", "--negatives", "32", "--hard", "8", "--chunk", "16", "--max-steps", "8",
        "--synthetic", "1"]  # fmt: skip


def test_tiny_run_ships_three_stages(tmp_path, tiny_cnn):
    out = str(tmp_path / "run")
    pretrain_guided_ppo.main(["--out", out, "--ppo-steps", "16", *TINY])
    progress = json.loads((tmp_path / "run" / "progress.json").read_text())
    assert progress["env_steps"] >= 16 and progress["placements"] > 0 and progress["simulated_moves"] > 0
    pretrain_guided_ppo.main(["--out", out, "--ppo-steps", "16", *TINY])  # resumed: nothing left to do
    assert json.loads((tmp_path / "run" / "progress.json").read_text())["env_steps"] == progress["env_steps"]
    states = {}
    for stage in ("untrained", "imitation", "ppo"):
        folder = tmp_path / stage
        pretrain_guided_ppo.main(
            ["--out", out, "--ppo-steps", "16", *TINY, "--ship", str(folder), "--stage", stage]
        )
        saved = read_transfer_policy(folder, method=METHOD)
        assert saved.meta.training.command.startswith("python -m experiments.pretraining.guided_ppo")
        assert not absolute_paths((folder / "meta.json").read_text())  # --out in tmp_path: <dir>/run
        assert saved.meta.training.models == ["tiny_cnn"]
        states[stage] = saved.policy_state
    key = "mlp_extractor.move_in.weight"
    assert not np.allclose(states["untrained"][key], states["imitation"][key])  # imitation learned
    assert not np.allclose(states["imitation"][key], states["ppo"][key])  # PPO moved the weights
    problem = PlacementProblem.make(tiny_cnn, "multi-accel", "simulated")
    result = make_method("guided_ppo", policy=str(tmp_path / "ppo")).place(problem, budget=20, seed=0)
    assert result.evaluations <= 20 and result.extra["pretraining"]["placements"] > 0
