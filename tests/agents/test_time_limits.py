"""Every solver with a ``time_limit`` stops within it plus the documented slack of one step, and reports
the gap it proved. Each segment MILP is slowed down here, so that a solve without the limit would run far
past it."""

from __future__ import annotations

import time

import numpy as np
import pytest

from agents import make_method
from agents.baselines import segment_solver
from agents.baselines.common import Deadline
from agents.baselines.segment_solver import solve_decomposed
from tests.agents.test_baselines import brute_force, random_problem
from tests.agents.test_exact import block_cost

STEP = 0.4  # seconds each slowed segment MILP takes
SLACK = 2.0  # one step, the final evaluations and interpreter noise on a loaded machine


@pytest.fixture
def slow_milps(monkeypatch) -> list:
    """Every segment MILP takes at least STEP seconds; returns the list of calls."""
    calls: list = []
    real = segment_solver.SegmentTable._solve

    def slow(self, anchor, end):
        if not self.deadline.expired():
            calls.append((anchor, end))
            time.sleep(STEP)
        return real(self, anchor, end)

    monkeypatch.setattr(segment_solver.SegmentTable, "_solve", slow)
    return calls


def test_the_decomposed_solver_stops_at_its_deadline_with_a_valid_bound(slow_milps) -> None:
    cost = block_cost(3, 12, 3, invoke=20e-6, broadcast=True)
    allowed = np.ones((cost.num_groups, 3), dtype=bool)
    start = time.perf_counter()
    result = solve_decomposed(cost, allowed, max_segment=4, enumerate_limit=1, deadline=Deadline.after(1.0))
    elapsed = time.perf_counter() - start
    assert result.timed_out and elapsed < 1.0 + SLACK
    full = solve_decomposed(cost, allowed, max_segment=4, enumerate_limit=1)  # no deadline: many more steps
    assert len(slow_milps) * STEP > 3.0 + SLACK and not full.timed_out
    assert result.lower_bound <= full.latency * (1 + 1e-9)  # still a lower bound of the optimum
    if result.placement is not None:
        assert result.latency >= full.lower_bound * (1 - 1e-9)


@pytest.mark.parametrize("memory", [False, True])
def test_exact_stops_within_its_time_limit_and_reports_its_gap(slow_milps, memory: bool) -> None:
    if memory:  # capacities that bind: the Lagrangian path
        env = random_problem(7, 6, "multi-accel", capacity=[13107.0] * 4)
    else:
        env = random_problem(4, 7, "multi-accel", 30e-6)
    method = make_method("exact", time_limit=1.0, enumerate_limit=1, max_segment=2)
    start = time.perf_counter()
    result = method.place(env)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0 + SLACK, elapsed
    extra = result.extra
    assert extra["time_limit"] == 1.0 and isinstance(extra["timed_out"], bool)
    assert 0.0 <= extra["gap"] <= 1.0 and extra["lower_bound"] <= brute_force(env) * (1 + 1e-7)
    assert extra["timed_out"] or extra["status"] == "Optimal"
    if not memory:
        assert extra["timed_out"] and np.isfinite(result.latency)  # the slowed MILPs cannot all run in 1 s


@pytest.mark.parametrize("name", ["milp", "moirai"])
def test_whole_graph_milps_stop_within_their_time_limit(name: str) -> None:
    env = random_problem(5, 8, "multi-accel", 30e-6)
    start = time.perf_counter()
    result = make_method(name, time_limit=0.5).place(env)
    assert time.perf_counter() - start < 0.5 + SLACK + 3.0  # + model build and HEFT's start
    assert np.isfinite(result.latency)
