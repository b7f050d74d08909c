"""The stall rule: a run ends after too many evaluation requests without a new placement, or too many
requests in all; every request counts (repeats included), whichever way it is asked for."""

from __future__ import annotations

import numpy as np
import pytest

from agents.base import PlacementMethod
from placement_gym import budget
from placement_gym.benchmark import evaluate, run_agent
from placement_gym.budget import Run
from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import BudgetExhaustedError, PlacementGymError, RunStalledError
from placement_gym.problem import PlacementProblem

TINY_SIM = dict(model="tiny_cnn", platform="cpu-dgpu", backend="simulated")


def _placements(problem: PlacementProblem, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = {tuple(rng.integers(0, problem.num_devices, problem.num_groups)) for _ in range(50 * n)}
    assert len(out) >= n
    return [np.array(p, dtype=np.int64) for p in sorted(out)[:n]]


class _Repeater(PlacementMethod):
    """Evaluates one new placement, then repeats it forever (a policy that stopped exploring)."""

    name = "repeater"

    def _place(self, env, tracker, seed):
        x = np.zeros(tracker.problem.num_groups, dtype=np.int64)
        while True:
            tracker.problem.evaluate(x)


def test_the_stall_error_ends_a_run_like_a_spent_budget():
    assert issubclass(RunStalledError, BudgetExhaustedError)


def test_repeats_past_the_limit_stall_and_a_new_placement_resets_the_count():
    problem = PlacementProblem.make(**TINY_SIM)
    x, y, z = _placements(problem, 3)
    run = Run(problem, budget=10, stall_requests=3)
    for p in (x, x, x, x):  # one new, three repeats: at the limit, not past it
        problem.evaluate(p)
    assert (run.requests, run.streak, run.used) == (4, 3, 1) and not run.stalled
    problem.evaluate(y)  # a new placement: the streak starts again
    problem.evaluate_batch(np.stack([x, y, x]))  # a batch of three repeats: three requests
    assert (run.requests, run.streak) == (8, 3)
    with pytest.raises(RunStalledError, match="4 evaluation requests in a row without a new placement"):
        problem.evaluate(x)
    assert run.stalled and run.requests == 8
    problem.evaluate(z)  # a new placement is still answered within the budget
    assert run.used == 3
    run.detach()


def test_requests_past_the_multiple_of_the_budget_stall_even_with_new_placements():
    problem = PlacementProblem.make(**TINY_SIM)
    ps = _placements(problem, 4)
    run = Run(problem, budget=4, stall_requests=0, request_multiple=2)  # at most 8 requests
    for p in (ps[0], ps[0], ps[1], ps[1], ps[2], ps[2], ps[3], ps[3]):
        problem.evaluate(p)
    with pytest.raises(RunStalledError, match="9 evaluation requests exceed 2 x its budget of 4"):
        problem.evaluate(ps[0])
    run.detach()


def test_env_steps_count_as_requests_and_a_run_without_a_budget_never_stalls():
    env = DevicePlacementEnv(**TINY_SIM)
    env.reset(seed=0)
    action = np.zeros(env.problem.num_groups, dtype=np.int64)
    run = Run(env.problem, budget=None, stall_requests=2)
    for _ in range(6):
        env.reset()
        env.step(action)
    assert run.requests == 6 and run.used == 1 and not run.stalled
    run.detach()
    bounded = Run(env.problem, budget=3, stall_requests=2)
    with pytest.raises(RunStalledError):
        for _ in range(6):
            env.reset()
            env.step(action)
    assert bounded.requests == 3 and bounded.stalled
    bounded.detach()


def test_records_from_other_processes_count_as_requests():
    problem = PlacementProblem.make(**TINY_SIM)
    x, y = _placements(problem, 2)
    run = Run(problem, budget=5, stall_requests=1)
    assert run.record(x, 1.0, True) and not run.record(x, 1.0, True)
    with pytest.raises(RunStalledError):
        run.record(x, 1.0, True)
    assert run.record(y, 1.0, True) and (run.requests, run.used) == (3, 2)
    run.detach()


def test_nested_runs_both_count_every_request_and_the_latest_decides():
    problem = PlacementProblem.make(**TINY_SIM)
    (x,) = _placements(problem, 1)
    outer = Run(problem, budget=5, stall_requests=2)
    problem.evaluate(x)
    inner = Run(problem, budget=5, stall_requests=10)
    for _ in range(4):
        problem.evaluate(x)
    assert (outer.requests, inner.requests) == (5, 4) and not outer.stalled
    inner.detach()
    outer.detach()
    leaked = Run(problem, budget=1, stall_requests=1)  # never detached: a later run is not its concern
    problem.evaluate(x)
    later = Run(problem, budget=5, stall_requests=10)
    for _ in range(5):
        problem.evaluate(x)
    assert later.requests == 5 and not leaked.stalled
    later.detach()


@pytest.mark.parametrize("value", [-1, 0.5, True, "10"])
def test_bad_limits_are_refused_with_their_value(value):
    problem = PlacementProblem.make(**TINY_SIM)
    with pytest.raises(PlacementGymError, match="stall_requests must be 0"):
        Run(problem, budget=5, stall_requests=value)


def test_a_stalled_method_returns_its_best_placement_and_the_row_records_the_stall(monkeypatch):
    monkeypatch.setattr(budget, "STALL_REQUESTS", 20)
    problem = PlacementProblem.make(**TINY_SIM)
    result = _Repeater().place(problem, budget=50)  # place() ends the stalled run instead of raising
    assert result.extra == {"stalled": True, "env_steps": 21} and result.evaluations == 1
    outcome = run_agent(_Repeater(), problem, 50, 0)
    assert outcome.extra["stalled"] is True and outcome.extra["env_steps"] == 21
    (row,) = evaluate(_Repeater(), tasks=["tiny_cnn/cpu-dgpu"], budget=50, seeds=[0])
    assert row.extra["stalled"] is True and row.extra["env_steps"] == 21 and row.evaluations == 1
    assert np.isfinite(row.latency)


def test_a_plain_function_agent_that_stalls_gets_a_row(monkeypatch):
    monkeypatch.setattr(budget, "REQUEST_MULTIPLE", 3)

    def spin(problem, budget_, seed):
        while True:
            problem.evaluate(np.ones(problem.num_groups, dtype=np.int64))

    (row,) = evaluate(spin, tasks=["tiny_cnn/cpu-dgpu"], budget=10, seeds=[0])
    assert row.extra["stalled"] is True and row.extra["stopped_by_budget"] is True
    assert row.extra["env_steps"] == 30
