"""Every solver with a ``time_limit`` stops within it plus the documented slack of one step, and reports
the gap it proved. Each segment MILP is slowed down here, so that a solve without the limit would run far
past it. The slowing runs on a simulated clock (each slowed MILP advances it by ``STEP``), so what the
tests check does not depend on how loaded the machine is: no wall-clock timing in unit tests."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from agents import make_method
from agents.baselines import segment_solver
from agents.baselines.common import Deadline
from agents.baselines.segment_solver import solve_decomposed
from tests.agents.test_baselines import brute_force, random_problem
from tests.agents.test_exact import block_cost

STEP = 0.4  # simulated seconds each slowed segment MILP takes
SLACK = 2.0  # HiGHS's own run past its limit, for the whole-graph MILPs (real seconds)


class SimulatedClock:
    """``time.perf_counter`` for the solvers: the slowed MILPs move it by ``STEP``, and every reading by
    ``TICK`` (so a loop bounded only by time still ends), whatever the machine's load."""

    TICK = 1e-4

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += self.TICK
        return self.now


@pytest.fixture
def slow_milps(monkeypatch) -> list:
    """Every segment MILP started before the deadline takes STEP simulated seconds; returns those calls."""
    calls: list = []
    clock = SimulatedClock()
    monkeypatch.setattr(time, "perf_counter", clock.perf_counter)  # the solvers' clock, not pytest's
    real = segment_solver.SegmentTable._solve

    def slow(self, anchor, end):
        if not self.deadline.expired():
            calls.append((anchor, end))
            clock.now += STEP
        return real(self, anchor, end)

    monkeypatch.setattr(segment_solver.SegmentTable, "_solve", slow)
    return calls


def within_limit(calls: list, limit: float) -> bool:
    """No segment MILP started after the limit ran out: at most ``ceil(limit / STEP)`` of them ran."""
    return len(calls) <= math.ceil(limit / STEP)


def test_the_decomposed_solver_stops_at_its_deadline_with_a_valid_bound(slow_milps) -> None:
    cost = block_cost(3, 12, 3, invoke=20e-6, broadcast=True)
    allowed = np.ones((cost.num_groups, 3), dtype=bool)
    result = solve_decomposed(cost, allowed, max_segment=4, enumerate_limit=1, deadline=Deadline.after(1.0))
    assert result.timed_out and within_limit(slow_milps, 1.0)
    limited = len(slow_milps)
    full = solve_decomposed(cost, allowed, max_segment=4, enumerate_limit=1)  # no deadline: many more steps
    assert (len(slow_milps) - limited) * STEP > 3.0 and not full.timed_out
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
    result = method.place(env)
    assert within_limit(slow_milps, 1.0), len(slow_milps)
    extra = result.extra
    assert extra["time_limit"] == 1.0 and isinstance(extra["timed_out"], bool)
    assert 0.0 <= extra["gap"] <= 1.0 and extra["lower_bound"] <= brute_force(env) * (1 + 1e-7)
    assert extra["timed_out"] or extra["status"] == "Optimal"
    if not memory:  # the decomposition: timed out exactly when its MILPs used up the limit
        assert extra["timed_out"] == (len(slow_milps) * STEP >= 1.0), (len(slow_milps), extra["timed_out"])
        assert np.isfinite(result.latency)


@pytest.mark.parametrize("name", ["milp", "moirai"])
def test_whole_graph_milps_stop_within_their_time_limit(name: str) -> None:
    env = random_problem(5, 8, "multi-accel", 30e-6)
    result = make_method(name, time_limit=0.5).place(env)
    assert result.extra["solve_time"] < 0.5 + SLACK  # HiGHS's run, which its time_limit governs
    assert np.isfinite(result.latency)
