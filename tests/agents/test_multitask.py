"""Multi-task training, zero-shot transfer and fine-tuning of one SB3 GNN policy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.sb3.methods import PPOGNN
from agents.sb3.multitask import common_envs, train_multitask
from placement_gym.errors import PlacementGymError
from placement_gym.problem import PlacementProblem

pytestmark = pytest.mark.usefixtures("one_thread")


def tasks(platform: str = "multi-accel") -> list[PlacementProblem]:
    return [
        PlacementProblem.make("tiny_cnn", platform, "simulated"),
        PlacementProblem.make("tiny_bert", platform, "simulated", coarsening="k", k=12),
    ]


def test_common_envs_share_spaces_and_refuse_what_cannot_be_shared():
    envs = common_envs(tasks(), "device", max_nodes=40, max_edges=64)
    assert len({(str(e.observation_space), str(e.action_space)) for e in envs}) == 1
    assert envs[0].action_space.shape == (40,)
    with pytest.raises(PlacementGymError, match="fixed number of devices"):
        common_envs([tasks()[0], PlacementProblem.make("tiny_cnn", "cpu-dgpu", "simulated")])
    with pytest.raises(PlacementGymError, match="smaller than the largest task"):
        common_envs(tasks(), max_nodes=4)
    with pytest.raises(PlacementGymError, match="no task"):
        common_envs([])


def test_one_budget_across_tasks_then_zero_shot_and_fine_tuning(tmp_path):
    problems = tasks()
    method = PPOGNN(observation="device", hidden=16, n_steps=8, batch_size=16)
    results = train_multitask(method, problems, budget=40, seed=0, max_nodes=48, max_edges=80)
    used = [r.evaluations for r in results]
    assert sum(used) <= 40 and min(used) >= 1  # a placement sampled again is free: may stay below 40
    assert [p.evaluations for p in problems] == used  # every evaluation counted on its own task
    assert all(np.isfinite(r.latency) for r in results)
    assert results[0].extra["model"] is results[1].extra["model"] is method.model

    folder = method.save(tmp_path / "policy")
    unseen = PlacementProblem.make("tiny_bert", "multi-accel", "simulated", coarsening="k", k=20)
    (env,) = common_envs([unseen], "device", max_nodes=48, max_edges=80)
    loaded = PPOGNN(fine_tune=True)
    loaded.load(folder)
    zero_shot = loaded.predict_placement(env)
    assert np.array_equal(zero_shot, method.predict_placement(env))
    assert unseen.evaluations == 1  # the same placement twice: the second answered from the memo

    before = {k: v.clone() for k, v in loaded.model.policy.state_dict().items()}
    tuned = loaded.place(env, budget=12, seed=0)
    assert 1 <= tuned.evaluations <= 12
    after = loaded.model.policy.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the loaded policy kept training
    (wrong,) = common_envs([unseen], "device", max_nodes=50, max_edges=80)
    with pytest.raises(PlacementGymError, match="fine-tuning needs the spaces"):
        loaded.place(wrong, budget=8, seed=0)


def test_cli_trains_on_several_envs_and_places_a_model_with_the_saved_policy(tmp_path, capsys):
    import json

    from experiments.cli import main

    kwargs = json.dumps({"model": "tiny_cnn", "platform": "multi-accel", "backend": "simulated"})
    out = tmp_path / "run"
    argv = ["train", "--agent", "ppo_gnn", "--env", "DevicePlacement-v0", "DevicePlacement-v0", "--budget", "20"]
    argv += ["--env-kwargs", kwargs, "--max-nodes", "48", "--max-edges", "80", "--out", str(out), "--no-progress"]
    assert main(argv + ["--agent-kwargs", '{"hidden": 16, "n_steps": 4, "batch_size": 8}']) == 0
    record = json.loads((out / "results.json").read_text())
    assert sum(t["evaluations"] for t in record["tasks"]) <= 20 and len(record["tasks"]) == 2
    placed = tmp_path / "placed.json"
    args = ["place", "--policy", str(out / "policy"), "--model", "tiny_bert", "--platform", "multi-accel"]
    assert main(args + ["--fine-tune", "6", "--out", str(placed)]) == 0
    result = json.loads(placed.read_text())
    assert result["fine_tune_evaluations"] == 6 and result["fine_tuned_latency"] <= result["zero_shot_latency"]
    assert main(["place", "--policy", str(out / "policy"), "--model", "tiny_bert", "--platform", "cpu-dgpu"]) == 2
    assert "4 devices" in capsys.readouterr().err
    assert main(["train", "--agent", "heft", "--env", "DevicePlacement-v0", "DevicePlacement-v0"]) == 2


def test_budget_callback_sums_the_trackers_of_several_tasks():
    from agents.base import BudgetTracker
    from agents.sb3.methods import BudgetCallback

    problems = tasks()
    trackers = [BudgetTracker(p, None) for p in problems]
    callback = BudgetCallback(trackers, limit=5, n_envs=2)
    assert callback._on_step()  # 0 used + 2 for the next step <= 5
    for p in problems:
        p.evaluate(np.zeros(p.num_groups, dtype=np.int64))
    assert callback._on_step()  # 2 used + 2 <= 5
    for p in problems:
        p.evaluate(np.ones(p.num_groups, dtype=np.int64))
    assert not callback._on_step()  # 4 used + 2 > 5
    with pytest.raises(PlacementGymError, match="one tracker"):
        BudgetCallback(trackers, limit=5, n_envs=2, remote=True)
