"""pretrained_ppo: the safe policy format, zero-shot and fine-tuned placement within the budget, the CLI."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch

from agents import make_method
from agents.sb3.policy_file import read_transfer_policy, write_transfer_policy
from agents.sb3.pretrained_ppo import (
    DEFAULT_ARCH,
    PPO_KWARGS,
    PRETRAINED_DIR,
    resolve_policy,
    shipped_policies,
)
from experiments import cli
from placement_gym.errors import PlacementGymError, UnknownNameError
from placement_gym.problem import PlacementProblem

COST = {"env_steps": 0, "evaluations": 0, "wall_s": 0.0, "cpu_s": 0.0, "cores": 1, "command": "test"}


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    """The shipped control's weights (the untrained policy) re-saved in a temporary folder."""
    state = read_transfer_policy(PRETRAINED_DIR / "untrained").policy_state
    return write_transfer_policy(
        tmp_path_factory.mktemp("policy") / "p", state, DEFAULT_ARCH, PPO_KWARGS, COST
    )


#: The command that trains the shipped policies (those trained before ``experiments/`` had subpackages
#: record the module's old path, as docs/pretrained.md says).
TRAINED_BY = ("python -m experiments.pretraining.pretrained_ppo", "python -m experiments.pretrain_sb3")


def test_shipped_policies_load_and_auto_keeps_each_model_out():
    assert {"all", "untrained"} <= set(shipped_policies())
    for name in shipped_policies():
        saved = read_transfer_policy(PRETRAINED_DIR / name)
        assert saved.policy_state and saved.meta.training.command.startswith(TRAINED_BY)
    for model in ("bert", "resnet50", "inception_v3"):
        path = resolve_policy("auto", model)
        if path.name != "all":  # a leave-one-out policy never saw the task's model
            assert path.name == f"no-{model}" and model not in read_transfer_policy(path).meta.training.models
    assert resolve_policy("auto", "vit_b16").name == "all"
    with pytest.raises(UnknownNameError, match="untrained"):
        resolve_policy("nope", "bert")


def test_load_refuses_a_pickle_and_a_damaged_folder(tmp_path, policy_dir):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "meta.json").write_text((policy_dir / "meta.json").read_text())
    (bad / "weights.pt").write_bytes(pickle.dumps({"policy": object()}))
    with pytest.raises(PlacementGymError, match="not a readable"):
        read_transfer_policy(bad)
    torch.save({"policy": {}}, bad / "weights.pt")
    (bad / "meta.json").write_text(json.dumps({"format": 1, "method": "ppo_gnn"}))
    with pytest.raises(PlacementGymError, match="pretrained_ppo"):
        read_transfer_policy(bad)


@pytest.mark.parametrize(
    ("fine_tune", "search", "moves"),
    [(0, "rank", None), (8, "rank", None), (0, "sample", "single,class,segment,branch")],
)
def test_places_within_the_budget_with_its_pretraining_cost(tiny_bert, policy_dir, fine_tune, search, moves):
    problem = PlacementProblem.make(tiny_bert, "multi-accel", "simulated")
    kwargs = dict(policy=str(policy_dir), fine_tune=fine_tune, search=search, moves=moves)
    method = make_method("pretrained_ppo", **kwargs)
    result = method.place(problem, budget=24, seed=0)
    assert result.evaluations <= 24 and np.isfinite(result.latency)
    assert result.extra["pretraining"]["command"] == "test"
    assert result.extra["fine_tune_evaluations"] >= fine_tune
    again = make_method("pretrained_ppo", **kwargs).place(
        PlacementProblem.make(tiny_bert, "multi-accel", "simulated"), budget=24, seed=0
    )
    assert again.latency == result.latency  # seeded


def test_rejects_bad_arguments(tiny_bert, policy_dir):
    with pytest.raises(PlacementGymError, match="fine_tune"):
        make_method("pretrained_ppo", fine_tune=-1)
    with pytest.raises(UnknownNameError, match="rank"):
        make_method("pretrained_ppo", search="greedy")
    problem = PlacementProblem.make(tiny_bert, "cpu-igpu", "simulated")
    with pytest.raises(PlacementGymError, match="budget"):
        make_method("pretrained_ppo", policy=str(policy_dir), fine_tune=10).place(problem, budget=10)


def test_bring_your_own_model_file_placed_zero_shot_from_the_cli(tmp_path, capsys):
    import openvino as ov

    class Branchy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(3, 8, 5, padding=2)
            self.c = torch.nn.Conv2d(16, 4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c(torch.cat([torch.relu(self.a(x)), torch.relu(self.b(x))], dim=1))

    xml = tmp_path / "my.xml"
    model = ov.convert_model(Branchy().eval(), example_input=torch.zeros(1, 3, 32, 32), input=[1, 3, 32, 32])
    ov.save_model(model, xml)  # static shapes
    out = tmp_path / "placed.json"
    cli.main(["place", "--model", str(xml), "--platform", "cpu-igpu", "--budget", "12", "--out", str(out)])
    record = json.loads(out.read_text())
    assert record["policy"] == "all" and record["evaluations"] <= 12
    assert len(record["placement"]) == record["groups"] and record["zero_shot_latency"] > 0
    assert record["pretraining"]["env_steps"] > 0
    assert "evaluations of the pretrained policy" in capsys.readouterr().out


def test_load_refuses_non_finite_weights_and_an_oversized_meta(tmp_path, policy_dir):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "meta.json").write_text((policy_dir / "meta.json").read_text())
    torch.save({"policy": {"w": torch.tensor([1.0, float("nan")])}}, bad / "weights.pt")
    with pytest.raises(PlacementGymError, match="NaN or infinite"):
        read_transfer_policy(bad)
    (bad / "meta.json").write_text(" " * (1 << 20))
    with pytest.raises(PlacementGymError, match="larger than"):
        read_transfer_policy(bad)
