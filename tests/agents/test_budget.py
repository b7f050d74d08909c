"""The budget counts distinct placements per run: a repeat is answered from the run's memo at no cost,
whichever way it is asked for (problem, tracker, batch, env step, a record from another process)."""

from __future__ import annotations

import numpy as np
import pytest

from agents import make_method
from agents.base import BudgetTracker, PlacementMethod
from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import BudgetExhaustedError
from placement_gym.problem import PlacementProblem

TINY_SIM = dict(model="tiny_cnn", platform="cpu-dgpu", backend="simulated")


def _two(problem: PlacementProblem) -> tuple[np.ndarray, np.ndarray]:
    g = problem.num_groups
    return np.zeros(g, dtype=np.int64), np.ones(g, dtype=np.int64)


class _Replayer(PlacementMethod):
    """Evaluates a fixed sequence of placements one at a time."""

    name = "replayer"

    def __init__(self, sequence):
        self.sequence = sequence

    def _place(self, env, tracker, seed):
        for p in self.sequence:
            tracker.problem.evaluate(p)
        return None


def test_x_x_y_x_costs_two_and_the_history_has_two_points():
    problem = PlacementProblem.make(**TINY_SIM)
    x, y = _two(problem)
    result = _Replayer([x, x, y, x]).place(problem, budget=2)
    assert result.evaluations == 2 and problem.evaluations == 2 and problem.memo_hits == 2
    assert [e for e, _ in result.history] == [1, 2]


def test_a_repeat_is_free_even_when_the_budget_is_spent_but_a_new_placement_is_refused():
    problem = PlacementProblem.make(**TINY_SIM)
    x, y = _two(problem)
    with pytest.raises(BudgetExhaustedError, match="budget of 1 distinct"):
        _Replayer([x, x, x, y]).place(problem, budget=1)


def test_each_run_has_its_own_memo():
    problem = PlacementProblem.make(**TINY_SIM)
    x, y = _two(problem)
    first = _Replayer([x, y]).place(problem, budget=5)
    second = _Replayer([x, y, x]).place(problem, budget=5)  # a new run pays for x and y again
    assert first.evaluations == second.evaluations == 2 and problem.evaluations == 4


def test_the_memo_is_bounded_and_a_dropped_placement_costs_again():
    problem = PlacementProblem.make(**TINY_SIM)
    problem.memo_size = 1
    x, y = _two(problem)
    for p in (x, x, y, x):  # y pushes x out of a memo of one
        problem.evaluate(p)
    assert problem.evaluations == 3 and problem.memo_hits == 1


def test_a_repeat_through_env_step_is_free():
    env = DevicePlacementEnv(**TINY_SIM)
    tracker = BudgetTracker(env.problem, 3)
    x, _ = _two(env.problem)
    for _ in range(4):
        env.reset(seed=0)
        _, _, _, _, info = env.step(x)
        assert "latency" in info  # every step still gets its full info
    assert tracker.used == 1 == env.problem.evaluations and len(tracker.history) == 1
    tracker.detach()


def test_a_batch_repeating_earlier_placements_pays_for_new_ones_only():
    problem = PlacementProblem.make(**TINY_SIM)
    x, y = _two(problem)
    tracker = BudgetTracker(problem, 2)
    tracker.evaluate(x)
    out = tracker.evaluate_batch(np.stack([x, y, x, y]))
    assert len(out) == 4 and tracker.used == 2 and tracker.exhausted
    z = x.copy()
    z[0] = 1
    assert len(tracker.evaluate_batch(np.stack([y, z, x]))) == 1  # cut before the first new placement
    tracker.detach()


def test_records_from_other_processes_count_each_placement_once():
    problem = PlacementProblem.make(**TINY_SIM)
    x, y = _two(problem)
    tracker = BudgetTracker(problem, None)
    assert [tracker.record(p, 1.0, True) for p in (x, x, y, x)] == [True, False, True, False]
    assert tracker.used == 2 and len(tracker.history) == 2
    tracker.detach()


def test_listeners_read_where_each_evaluation_came_from():
    """A recorded evaluation carries its worker, vector step and seconds to the listeners; one made in
    this process carries none but the backend's seconds."""
    problem = PlacementProblem.make(**TINY_SIM)
    x, y = _two(problem)
    tracker = BudgetTracker(problem, None)
    seen = []
    tracker.listeners.append(lambda t, *_: seen.append((t.worker, t.vector_step, t.evaluation_s)))
    tracker.record(x, 1.0, True, worker=1, vector_step=3, evaluation_s=0.25)
    tracker.record(x, 1.0, True, worker=0, vector_step=4, evaluation_s=0.5)  # a repeat: not reported
    problem.evaluate(y)
    assert seen[0] == (1, 3, 0.25) and len(seen) == 2
    worker, step, seconds = seen[1]
    assert worker is None and step is None and seconds == problem.last_evaluation_s and seconds > 0
    tracker.detach()


def test_random_search_stops_when_the_space_is_smaller_than_the_budget():
    problem = PlacementProblem.make(**TINY_SIM)
    space = int(np.prod(problem.device_mask.sum(axis=1)))
    result = make_method("random_search", batch_size=8).place(problem, budget=space + 100, seed=0)
    assert result.evaluations <= space
