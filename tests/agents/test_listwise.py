"""Listwise training of the move scorer: sampling, targets, the loss's order, and full-neighbourhood labels."""

from __future__ import annotations

import numpy as np
import pytest

from agents.learned.listwise import Neighbourhoods, fit_listwise, listwise_targets, sample_neighbourhood
from agents.learned.moves import MOVE_FEATURES
from placement_gym.errors import PlacementGymError


def test_sampling_keeps_every_improving_move_and_the_weights_count_every_move():
    rng = np.random.default_rng(0)
    change = np.concatenate([np.full(7, -0.01), np.full(93, 0.02)])
    features = np.arange(100, dtype=np.float32)[:, None]
    f, c, w = sample_neighbourhood(features, change, 20, rng)
    assert (c < 0).sum() == 7 and len(c) == 27
    assert w.sum() == pytest.approx(100)
    assert set(f[c < 0, 0].tolist()) == set(range(7))
    f, c, w = sample_neighbourhood(features, change, 500, rng)
    assert len(c) == 100 and np.all(w == 1)


def test_hard_negatives_are_the_top_ranked_moves_that_do_not_improve():
    rng = np.random.default_rng(0)
    change = np.concatenate([np.full(5, -0.01), np.full(95, 0.02)])
    scores = np.arange(100, 0, -1, dtype=np.float64)  # the ranker puts the last moves first
    features = np.arange(100, dtype=np.float32)[:, None]
    f, c, w = sample_neighbourhood(features, change, 10, rng, scores, hard=3)
    assert f[5:8, 0].tolist() == [97.0, 98.0, 99.0] and np.all(w[:8] == 1)
    assert len(c) == 18 and w.sum() == pytest.approx(100)


def test_targets_favour_the_best_move_of_each_placement():
    change = np.array([-0.02, -0.01, 0.03, 0.0, -0.04, 0.01])
    state = np.array([0, 0, 0, 1, 2, 2])
    q = listwise_targets(change, state, temperature=0.5)
    assert q[0] > q[1] > 0 and q[2] == 0
    assert q[1] / q[0] == pytest.approx(np.exp(-1.0))  # half the best gain: exp(-0.5 / 0.5)
    assert q[3] == 0  # no improving move: nothing to learn
    assert q[4] == pytest.approx(1.0) and q[5] == 0
    with pytest.raises(PlacementGymError, match="temperature"):
        listwise_targets(change, state, 0.0)


def synthetic(states: int, moves: int, seed: int) -> Neighbourhoods:
    """Placements whose moves improve by ``-0.01 * feature 0`` where that is positive."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((states * moves, len(MOVE_FEATURES))).astype(np.float32)
    change = np.where(x[:, 0] > 1.0, -0.01 * x[:, 0], 0.01)
    state = np.repeat(np.arange(states), moves)
    return Neighbourhoods(x, change, np.ones(len(change)), state)


def test_the_fitted_order_puts_the_best_move_first():
    data = synthetic(60, 50, 0)
    scorer, loss = fit_listwise(data, epochs=40, states_per_batch=8)
    test = synthetic(30, 50, 1)
    hits = 0
    for s in range(30):
        rows = test.state == s
        if (test.change[rows] < 0).any():
            hits += int(np.argmin(scorer.predict(test.features[rows])) == np.argmin(test.change[rows]))
    assert hits >= 25 and np.isfinite(loss)


def test_nothing_to_rank_is_an_error():
    data = Neighbourhoods(
        np.zeros((4, len(MOVE_FEATURES))), np.full(4, 0.01), np.ones(4), np.array([0, 0, 1, 1])
    )
    with pytest.raises(PlacementGymError, match="improving"):
        fit_listwise(data)


def test_concatenate_keeps_placements_apart():
    a = Neighbourhoods(np.zeros((3, 1)), np.zeros(3), np.ones(3), np.array([0, 0, 1]))
    both = Neighbourhoods.concatenate([a, a])
    assert both.state.tolist() == [0, 0, 1, 2, 2, 3]


def test_full_neighbourhood_labels_are_the_simulated_latencies():
    from agents.learned.search import CostRanker
    from experiments.pretraining.guided_improvement import collect_neighbourhoods
    from placement_gym.problem import PlacementProblem

    problem = PlacementProblem.make("tiny_bert", "multi-accel", "simulated")
    data, evaluations, simulated = collect_neighbourhoods(
        [("tiny_bert", problem)], lambda rng: CostRanker(), budget=800, seed=0, negatives=10**6
    )
    assert evaluations <= 800 and simulated == len(data.change) and np.all(data.weight == 1)
    assert int(data.state.max()) >= 1  # the episode ranked more than one placement
    # the first placement ranked is the start; each of its moves was labelled by a full simulation
    from agents.base import BudgetTracker
    from agents.baselines.common import allowed_devices
    from agents.learned.moves import MoveFeaturizer, branch_sets, propose, twin_classes
    from agents.learned.search import start_placements

    tracker = BudgetTracker(problem, 100)
    starts = start_placements(tracker, allowed_devices(problem))
    tracker.detach()
    lat = [problem.evaluate(s).latency for s in starts]
    start, latency = starts[int(np.argmin(lat))], min(lat)
    cost = problem.cost_model()
    moves = propose(start, allowed_devices(problem), twin_classes(cost), branch_sets(cost))
    expected = np.array(
        [problem.evaluate(moves.apply(start, i)).latency / latency - 1 for i in range(len(moves))]
    )
    first = data.state == 0
    assert first.sum() == len(moves)
    assert np.allclose(np.sort(data.change[first]), np.sort(expected))
    features = MoveFeaturizer(cost).features(start, latency, moves)
    assert np.allclose(np.sort(data.features[first], axis=0), np.sort(features, axis=0))


def test_descents_add_placements_after_the_episode():
    from agents.learned.search import CostRanker
    from experiments.pretraining.guided_improvement import collect_neighbourhoods
    from placement_gym.problem import PlacementProblem

    problem = PlacementProblem.make("tiny_cnn", "multi-accel", "simulated")
    args = ([("tiny_cnn", problem)], lambda rng: CostRanker())
    plain, n0, _ = collect_neighbourhoods(*args, budget=20, seed=0, negatives=10**6)
    more, n1, _ = collect_neighbourhoods(*args, budget=20, seed=0, negatives=10**6, descend=5, descents=3)
    assert n0 == n1 == 20  # descents are simulated offline: no evaluation of the episode's budget
    k = len(plain.change)
    assert np.array_equal(more.change[:k], plain.change[:k]) and more.state.max() > plain.state.max()
    assert (more.state == plain.state.max() + 1).any()


def test_episodes_follow_the_given_search_settings():
    from agents.base import BudgetTracker
    from agents.learned.search import CostRanker, guided_search
    from experiments.pretraining.guided_improvement import collect_neighbourhoods
    from placement_gym.problem import PlacementProblem

    problem = PlacementProblem.make("tiny_bert", "multi-accel", "simulated")
    visited = []
    tracker = BudgetTracker(problem, 120)
    rng = np.random.default_rng([0, 0])
    guided_search(
        tracker, CostRanker(), rng, batch_size=4, depth=8, walk=0.02,
        visitor=lambda p, lat, m, f: visited.append(len(m)),
    )  # fmt: skip
    tracker.detach()
    args = ([("tiny_bert", problem)], lambda rng: CostRanker())
    shallow, _, _ = collect_neighbourhoods(*args, budget=120, seed=0, negatives=10**6, depth=8, walk=0.02)
    full, _, _ = collect_neighbourhoods(*args, budget=120, seed=0, negatives=10**6)
    # one labelled neighbourhood per placement the search with depth 8 and the walk ranked, in its order
    assert np.bincount(shallow.state).tolist() == visited
    assert int(shallow.state.max()) != int(full.state.max())
