"""The reimplemented learning systems: end to end on tiny graphs, budgets, reproducibility, quality."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents import make_method
from agents.base import BudgetTracker
from agents.systems.common import MovingAverageBaseline, reinforce
from agents.systems.grouper_placer import default_num_groups, vote
from agents.systems.placeto import Placeto
from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import PlacementError
from placement_gym.problem import problem_of

SYSTEMS = ("hsdag", "rl_placement", "grouper_placer", "placeto")


@pytest.fixture(scope="module")
def cnn_env():
    return DevicePlacementEnv("tiny_cnn", "cpu-dgpu", "simulated")


@pytest.fixture(scope="module")
def bert_env():
    return DevicePlacementEnv("tiny_bert", "cpu-dgpu", "simulated")


@pytest.fixture(scope="module")
def bert_multi_env():
    return DevicePlacementEnv("tiny_bert", "multi-accel", "simulated")


@pytest.mark.parametrize("name", SYSTEMS)
def test_runs_within_budget_and_reproducible(name, cnn_env, bert_multi_env):
    for env, budget in ((cnn_env, 40), (bert_multi_env, 45)):
        first = make_method(name, samples_per_update=10).place(env, budget=budget, seed=3)
        second = make_method(name, samples_per_update=10).place(env, budget=budget, seed=3)
        g, d = env.num_groups, env.num_devices
        assert first.placement.shape == (g,) and first.placement.dtype == np.int64
        assert first.placement.min() >= 0 and first.placement.max() < d
        assert np.isfinite(first.latency)
        assert first.evaluations == budget and len(first.history) == budget
        assert first.latency == pytest.approx(env.problem.evaluate(first.placement).latency)
        np.testing.assert_array_equal(first.placement, second.placement)
        assert [p["mean_reward"] for p in first.extra["curve"]] == [
            p["mean_reward"] for p in second.extra["curve"]
        ]
        assert isinstance(first.extra["policy"], torch.nn.Module)


@pytest.mark.parametrize("name", SYSTEMS)
def test_matches_best_single_device_with_moderate_budget(name, bert_env):
    # On tiny_bert / cpu-dgpu a random placement is ~6x slower than the best single device (the CPU);
    # learning must at least recover it.
    result = make_method(name).place(bert_env, budget=200, seed=0)
    assert result.latency <= bert_env.problem.baseline.latency * (1 + 1e-9)
    curve = result.extra["curve"]
    assert curve[-1]["mean_reward"] > curve[0]["mean_reward"]


def test_placeto_generalises_to_unseen_graph(cnn_env, bert_env):
    trained = Placeto().place(cnn_env, budget=60, seed=0).extra["policy"]
    before = [p.detach().clone() for p in trained.parameters()]
    zero_shot = Placeto(policy=trained, train=False).place(bert_env, budget=1, seed=0)
    assert zero_shot.evaluations == 1 and zero_shot.placement.shape == (bert_env.num_groups,)
    assert np.isfinite(zero_shot.latency)
    fine_tuned = Placeto(policy=trained).place(bert_env, budget=20, seed=0)
    assert fine_tuned.evaluations == 20
    assert all(torch.equal(a, b) for a, b in zip(before, trained.parameters()))  # caller's copy intact


def test_placeto_rejects_policy_for_other_device_count(cnn_env, bert_multi_env):
    trained = Placeto().place(cnn_env, budget=10, seed=0).extra["policy"]
    with pytest.raises(PlacementError, match="devices"):
        Placeto(policy=trained, train=False).place(bert_multi_env, budget=1)
    with pytest.raises(ValueError, match="policy"):
        Placeto(train=False)


def test_default_budget_is_used_when_none(cnn_env):
    result = make_method("hsdag", default_budget=12, samples_per_update=5).place(cnn_env, budget=None)
    assert result.evaluations == 12


def test_reinforce_never_exceeds_budget(cnn_env):
    from agents.systems.common import SampleBatch

    weight = torch.zeros(1, requires_grad=True)
    problem = problem_of(cnn_env)
    tracker, start = BudgetTracker(problem, 7), problem.evaluations
    calls: list[int] = []
    evaluate_batch, evaluate = problem.backend.evaluate_batch, problem.backend.evaluate
    problem.backend.evaluate_batch = lambda batch: calls.append(len(batch)) or evaluate_batch(batch)
    problem.backend.evaluate = lambda placement: calls.append(1) or evaluate(placement)
    drawn = iter(range(10**6))

    def sample(k: int) -> SampleBatch:  # distinct placements: the base-D digits of 0, 1, 2, ...
        codes = np.array([next(drawn) for _ in range(k)])
        digits = codes[:, None] // problem.num_devices ** np.arange(problem.num_groups) % problem.num_devices
        return SampleBatch(digits.astype(np.int64), weight.expand(k) * 0.0)

    curve = reinforce(tracker, 7, sample, torch.optim.SGD([weight], lr=0.1), samples_per_update=3)
    assert tracker.used == problem.evaluations - start == 7
    assert [p["evaluations"] for p in curve] == [3, 6, 7]
    assert calls == [3, 3, 1]  # one backend call per update


def test_reinforce_pays_once_for_a_placement_repeated_in_a_batch(cnn_env):
    from agents.systems.common import SampleBatch

    weight = torch.zeros(1, requires_grad=True)
    problem = problem_of(cnn_env)
    tracker, start = BudgetTracker(problem, 4), problem.evaluations

    def sample(k: int) -> SampleBatch:  # k copies of one placement, a new one per update
        placement = np.full((k, problem.num_groups), len(tracker.history) % problem.num_devices)
        placement[:, 0] = len(tracker.history) // problem.num_devices
        return SampleBatch(placement, weight.expand(k) * 0.0)

    curve = reinforce(tracker, 4, sample, torch.optim.SGD([weight], lr=0.1), samples_per_update=3)
    assert [p["evaluations"] for p in curve] == [1, 2, 3, 4]
    assert tracker.used == problem.evaluations - start == 4


def test_moving_average_baseline():
    base = MovingAverageBaseline(decay=0.5, normalize=False)
    np.testing.assert_allclose(base.advantages(np.array([1.0, 3.0])), [-1.0, 1.0])
    np.testing.assert_allclose(base.advantages(np.array([4.0, 6.0])), [2.0, 4.0])  # baseline still 2
    assert base.value == pytest.approx(3.5)
    with pytest.raises(ValueError):
        MovingAverageBaseline(decay=1.0)


def test_grouper_vote_and_default_groups():
    op_devices = np.array([[0, 1, 1], [1, 0, 0]])
    assignment = np.array([0, 0, 1])
    weights = np.array([5.0, 1.0, 1.0])
    np.testing.assert_array_equal(vote(op_devices, assignment, weights, 2, 2), [[0, 1], [1, 0]])
    assert default_num_groups(1000, 2) == 40 and default_num_groups(1000, 20) == 256
    assert default_num_groups(10, 4) == 10
