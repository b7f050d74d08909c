"""Guided improvement: moves, features, the scorer's file format, budgets, determinism, optimality."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from agents import make_method
from agents.baselines.common import allowed_devices
from agents.learned.moves import KINDS, MOVE_FEATURES, MoveFeaturizer, propose, twin_classes
from agents.learned.scorer import MoveScorer, fit_scorer
from placement_gym.errors import PlacementGymError, UnknownNameError
from placement_gym.problem import PlacementProblem


@pytest.fixture(scope="module")
def small() -> PlacementProblem:
    return PlacementProblem.make("tiny_bert", "multi-accel", "simulated", coarsening="k", k=6)


@pytest.fixture(scope="module")
def fused() -> PlacementProblem:
    return PlacementProblem.make("tiny_bert", "multi-accel", "simulated")


def test_moves_change_the_placement_on_allowed_devices_and_cover_every_single_move(fused):
    allowed = allowed_devices(fused)
    placement = np.zeros(fused.num_groups, dtype=np.int64)
    moves = propose(placement, allowed, twin_classes(fused.cost_model()))
    singles = {
        (int(np.flatnonzero(m)[0]), int(d))
        for m, d, k in zip(moves.members, moves.target, moves.kind)
        if k == 0
    }
    assert singles == {(g, d) for g, d in zip(*np.nonzero(allowed)) if d != 0}
    mixed = np.random.default_rng(0).integers(0, fused.num_devices, fused.num_groups)
    kinds = set(moves.kind.tolist()) | set(
        propose(mixed, allowed, twin_classes(fused.cost_model())).kind.tolist()
    )
    assert kinds == set(range(len(KINDS)))  # every kind occurs on tiny_bert
    for i in range(len(moves)):
        after = moves.apply(placement, i)
        assert not np.array_equal(after, placement)
        assert allowed[np.arange(fused.num_groups), after].all()


def test_twin_classes_group_identical_layers(fused):
    classes = twin_classes(fused.cost_model())
    cost = fused.cost_model()
    for c in np.unique(classes):
        rows = cost.compute[classes == c]
        assert np.allclose(rows, rows[0], rtol=1e-5)
    assert len(np.unique(classes)) < fused.num_groups  # tiny_bert repeats its layers


def test_single_move_features_match_the_cost_model(fused):
    cost = fused.cost_model()
    placement = np.zeros(fused.num_groups, dtype=np.int64)
    moves = propose(placement, allowed_devices(fused), twin_classes(cost))
    feats = MoveFeaturizer(cost).features(placement, 1e-3, moves)
    assert feats.shape == (len(moves), len(MOVE_FEATURES)) and np.isfinite(feats).all()
    i = int(np.flatnonzero(moves.kind == 0)[0])
    g, d = int(np.flatnonzero(moves.members[i])[0]), int(moves.target[i])
    assert feats[i, 0] == pytest.approx((cost.compute[g, d] - cost.compute[g, 0]) / 1e-3, rel=1e-4)


def test_criticality_is_one_on_the_longest_path(fused):
    crit = MoveFeaturizer(fused.cost_model()).criticality(np.zeros(fused.num_groups, dtype=np.int64))
    assert crit.max() == pytest.approx(1.0) and (crit >= 0).all()


def test_budget_is_exact_and_the_start_is_heft_or_a_single_device(fused):
    result = make_method("guided_improvement").place(fused, budget=40, seed=0)
    assert result.evaluations == 40 and len(result.history) == 40
    singles = [fused.evaluate(np.full(fused.num_groups, d)).latency for d in range(fused.num_devices)]
    assert result.latency <= min(singles)


def test_deterministic_with_a_seed(fused):
    a = make_method("guided_improvement").place(fused, budget=60, seed=3)
    b = make_method("guided_improvement").place(fused, budget=60, seed=3)
    assert np.array_equal(a.placement, b.placement) and a.history == b.history


@pytest.mark.parametrize("ranker", ["learned", "cost", "random"])
def test_reaches_the_brute_force_optimum_of_a_tiny_graph(ranker, small):
    space = np.array(list(itertools.product(range(small.num_devices), repeat=small.num_groups)))
    optimum = min(e.latency for e in small.evaluate_batch(space))
    result = make_method("guided_improvement", ranker=ranker).place(small, budget=len(space), seed=0)
    assert result.evaluations <= len(space)  # never evaluates a placement twice
    assert result.latency == pytest.approx(optimum)


def test_scorer_round_trips_and_ranks_improving_moves_first(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, len(MOVE_FEATURES))).astype(np.float32)
    change = np.where(x[:, 0] < 0, -0.01, 0.02)  # moves with a negative first feature improve
    scorer, _ = fit_scorer(x, change, epochs=30)
    assert (scorer.predict(x[x[:, 0] < -0.5]).max()) < scorer.predict(x[x[:, 0] > 0.5]).min()
    scorer.save(tmp_path / "s", {"note": "test"})
    again = MoveScorer.load(tmp_path / "s")
    assert np.allclose(again.predict(x), scorer.predict(x))


def test_bad_arguments_and_missing_weights_are_named(tmp_path):
    with pytest.raises(UnknownNameError):
        make_method("guided_improvement", ranker="greedy")
    with pytest.raises(ValueError, match="batch_size"):
        make_method("guided_improvement", batch_size=0)
    with pytest.raises(PlacementGymError, match="train_guided"):
        make_method("guided_improvement", weights=tmp_path)


def test_fine_tuning_refits_within_the_budget(fused):
    from agents.base import BudgetTracker
    from agents.learned.scorer import PRETRAINED, FineTuningScorer
    from agents.learned.search import guided_search

    base = MoveScorer.load(PRETRAINED)
    ranker = FineTuningScorer(base, after=20, epochs=2)
    tracker = BudgetTracker(fused, 80)
    guided_search(tracker, ranker, np.random.default_rng(0))
    tracker.detach()
    assert tracker.used == 80 and ranker.tuned and ranker.scorer is not base
    result = make_method("guided_improvement", fine_tune=20).place(fused, budget=80, seed=0)
    assert result.evaluations == 80
    with pytest.raises(ValueError, match="fine_tune"):
        make_method("guided_improvement", ranker="cost", fine_tune=10)
