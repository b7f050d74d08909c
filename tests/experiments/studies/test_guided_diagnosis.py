"""The guided-improvement diagnosis: its neighbourhood census agrees with direct evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from agents.baselines.common import allowed_devices
from agents.baselines.heft import heft_placement
from agents.learned.moves import KINDS, branch_sets, propose, twin_classes
from agents.learned.scorer import MoveScorer
from experiments.studies.guided_diagnosis import neighbourhood
from placement_gym.problem import PlacementProblem


def test_neighbourhood_counts_the_improving_moves_and_finds_the_best():
    problem = PlacementProblem.make("tiny_bert", "multi-accel", "simulated", coarsening="k", k=6)
    placement = np.zeros(problem.num_groups, dtype=np.int64)
    info = neighbourhood(problem, placement, MoveScorer.load())
    cost = problem.cost_model()
    moves = propose(placement, allowed_devices(problem), twin_classes(cost), branch_sets(cost))
    base = problem.evaluate(placement).latency
    lat = np.array([problem.evaluate(moves.apply(placement, i)).latency for i in range(len(moves))])
    assert info["moves"] == len(moves)
    assert info["improving"] == {k: int(((lat < base * (1 - 1e-9)) & (moves.kind == i)).sum())
                                 for i, k in enumerate(KINDS)}  # fmt: skip
    assert info["best_change"] == pytest.approx(lat.min() / base - 1)
    assert problem.evaluate(info["best"]).latency == pytest.approx(lat.min())
    assert (info["first_improving_rank"] is None) == (sum(info["improving"].values()) == 0)


def test_neighbourhood_counts_the_infeasible_moves():
    problem = PlacementProblem.make("tiny_bert", "model-parallel", "simulated", reward="neg_latency_ms")
    cost = problem.cost_model()
    allowed = allowed_devices(problem)
    placement = heft_placement(cost, allowed)[0]
    assert problem.evaluate(placement).feasible
    info = neighbourhood(problem, placement, MoveScorer.load(), top=10)
    moves = propose(placement, allowed, twin_classes(cost), branch_sets(cost))
    feasible = np.array([problem.evaluate(moves.apply(placement, i)).feasible for i in range(len(moves))])
    assert info["infeasible"] == int((~feasible).sum()) > 0
    assert 0 <= info["infeasible_in_top"] <= min(10, info["infeasible"])
