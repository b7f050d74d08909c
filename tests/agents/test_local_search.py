"""Local search and simulated annealing: budgets, start placements, exhaustion of small spaces, optimality."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from agents import make_method
from agents.baselines.common import allowed_devices
from agents.baselines.heft import heft_placement
from placement_gym.errors import UnknownNameError
from placement_gym.problem import PlacementProblem

SEARCHES = ["local_search", "simulated_annealing"]


@pytest.fixture(scope="module")
def problem() -> PlacementProblem:
    return PlacementProblem.make("tiny_bert", "cpu-igpu", "simulated", coarsening="k", k=8)


@pytest.mark.parametrize("name", SEARCHES)
def test_search_spends_exactly_its_budget_and_never_loses_to_its_start(name, problem):
    heft = problem.evaluate(heft_placement(problem.cost_model(), allowed_devices(problem))[0]).latency
    result = make_method(name).place(problem, budget=60, seed=0)
    assert result.evaluations == 60 and len(result.history) == 60
    assert result.history[0][1] == heft  # the first evaluation is the start placement
    assert result.latency <= heft
    assert [b for _, b in result.history] == sorted((b for _, b in result.history), reverse=True)


@pytest.mark.parametrize("name", SEARCHES)
def test_search_stops_when_the_space_is_exhausted_and_finds_the_optimum(name, problem):
    space = np.array(list(itertools.product(range(problem.num_devices), repeat=problem.num_groups)))
    latencies = [e.latency for e in problem.evaluate_batch(space)]
    result = make_method(name, start="random").place(problem, budget=10 * len(space), seed=1)
    assert result.evaluations <= len(space)  # every placement is proposed at most once
    assert result.latency == pytest.approx(min(latencies))


def test_search_arguments_are_checked():
    with pytest.raises(UnknownNameError):
        make_method("local_search", start="gpu")
    with pytest.raises(ValueError, match="batch_size"):
        make_method("simulated_annealing", batch_size=0)
    with pytest.raises(ValueError, match="temperatures"):
        make_method("simulated_annealing", t_start=0.001, t_end=0.01)
