"""Minari datasets: build one small task's datasets in a temporary data path, reload, check episodes and
that Minari's normalised score is the task's."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("minari")
pytest.importorskip("h5py")

TASK = ("resnet50", "cpu-igpu")  # 57 groups, 2 devices: the smallest suite task


@pytest.fixture()
def minari_path(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    return tmp_path


def test_oneshot_round_trip_and_normalised_score(minari_path):
    import minari

    from experiments.cli.datasets import build_dataset, dataset_id
    from placement_gym.problem import PlacementProblem

    build_dataset(*TASK, "oneshot", path_points=2)
    name = dataset_id(*TASK, "oneshot")
    assert (minari_path / "placement_gym").is_dir()
    dataset = minari.load_dataset(name)
    episodes = list(dataset.iterate_episodes())
    assert len(episodes) == 3 + 2 * 2  # optimum, HEFT, baseline, two points on each improvement path

    problem = PlacementProblem.make(TASK[0], TASK[1], "simulated")
    ref = problem.reference
    np.testing.assert_array_equal(episodes[0].actions[0], ref.placement)
    returns = np.array([ep.rewards.sum() for ep in episodes])
    ours = []
    for ep in episodes:
        assert len(ep.rewards) == 1 and ep.terminations[-1]
        ours.append(problem.score(problem.evaluate(ep.actions[0]).latency))
    normalised = minari.get_normalized_score(dataset, returns)
    np.testing.assert_allclose(normalised, ours, rtol=1e-9, atol=1e-12)
    assert normalised[0] == pytest.approx(1.0) and normalised[2] == pytest.approx(0.0)
    assert (normalised[3:] > 0).all()  # every point of an improvement path beats the baseline here


def test_sequential_episodes_place_groups_in_order(minari_path):
    import minari

    from experiments.cli.datasets import build_dataset, dataset_id
    from placement_gym.problem import PlacementProblem

    build_dataset(*TASK, "sequential")
    dataset = minari.load_dataset(dataset_id(*TASK, "sequential"))
    episodes = list(dataset.iterate_episodes())
    ref = PlacementProblem.make(TASK[0], TASK[1], "simulated").reference
    assert len(episodes) == 3
    np.testing.assert_array_equal(episodes[0].actions, ref.placement)
    assert episodes[0].rewards[:-1].sum() == 0  # the reward comes on the last step
    score = minari.get_normalized_score(dataset, np.array([episodes[0].rewards.sum()]))
    assert score[0] == pytest.approx(1.0)
    env = dataset.recover_environment()
    assert env.unwrapped.mode == "sequential"


def test_bad_task_names_fail_clearly():
    from experiments.cli.datasets import dataset_id, parse_task, task_env_id
    from placement_gym.errors import ConfigError, UnknownNameError

    with pytest.raises(ConfigError, match="model/platform"):
        parse_task("resnet50")
    with pytest.raises(UnknownNameError, match="resnet5"):
        task_env_id("resnet5", "cpu-igpu")
    with pytest.raises(UnknownNameError, match="sequentail"):
        dataset_id("resnet50", "cpu-igpu", "sequentail")


def test_behaviour_cloning_example_trains_and_scores(minari_path):
    import importlib.util
    from pathlib import Path

    from experiments.cli.datasets import build_dataset

    path = Path(__file__).resolve().parents[2] / "examples" / "behaviour_cloning.py"
    spec = importlib.util.spec_from_file_location("behaviour_cloning", path)
    bc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bc)
    build_dataset(*TASK, "oneshot", path_points=0)
    demos = bc.load_demonstrations([TASK])
    feats, allowed, optimal = demos[0]
    assert feats.shape[:2] == allowed.shape and len(optimal) == feats.shape[0] == 57
    model = bc.train(demos, epochs=3, seed=0)
    row = bc.score_on(model, *TASK)
    assert np.isfinite(row["bc_score"]) and row["bc_score"] <= 1.0 + 1e-9 and 0 < row["heft_score"] < 1
    assert row["groups"] == 57 and row["bc_latency_ms"] >= row["optimum_ms"] * (1 - 1e-9)


def test_improve_episodes_walk_from_heft_to_the_optimum(minari_path):
    import minari

    from experiments.cli.datasets import build_dataset, dataset_id

    build_dataset(*TASK, "improve")
    dataset = minari.load_dataset(dataset_id(*TASK, "improve"))
    episodes = list(dataset.iterate_episodes())
    assert len(episodes) == 2
    env = dataset.recover_environment()
    ref = problem_ref()
    for index, episode in enumerate(episodes):
        _, info = env.reset(seed=index, options={} if index == 0 else {"start": "best_single"})
        for action in episode.actions:
            _, _, _, _, info = env.step(int(action))
        np.testing.assert_array_equal(info["placement"], ref.placement)  # the replayed path ends at the optimum
        np.testing.assert_allclose(episode.rewards.sum(), np.log(info["start_latency"] / ref.latency), rtol=1e-9)
    score = minari.get_normalized_score(dataset, np.array([episodes[0].rewards.sum()]))
    assert score[0] == pytest.approx(1.0)


def problem_ref():
    from placement_gym.problem import PlacementProblem

    return PlacementProblem.make(TASK[0], TASK[1], "simulated").reference
