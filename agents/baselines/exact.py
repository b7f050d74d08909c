"""The exact placement method: the simulated latency's optimum, or a placement with a proven lower bound.

Where memory cannot bind it runs the decomposed solver (:mod:`agents.baselines.segment_solver`: the
schedule cut into segments, each solved exactly, joined by a shortest path). The decomposition ignores
memory: when some placement could overfill a device (:func:`~agents.baselines.decomposition.memory_can_bind`),
the solver relaxes memory into a Lagrangian penalty on the weights that the decomposition minimises, and
closes the rest with the whole-graph MILP (:mod:`agents.baselines.exact_memory`). Both paths share one
driver: evaluate the starting placements, solve, evaluate the solver's placement, report the gap.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

from agents.base import BudgetTracker, PlacementMethod
from agents.baselines.baechi import list_scheduler_placements
from agents.baselines.common import Deadline, allowed_devices, evaluate_within_budget
from agents.baselines.decomposition import memory_can_bind
from agents.baselines.exact_memory import solve_with_memory
from agents.baselines.heft import heft_placement
from agents.baselines.segment_solver import solve_decomposed
from placement_gym.errors import PlacementGymError
from placement_gym.simulation.cost_model import CostModel


class ExactPlacement(PlacementMethod):
    """The decomposed exact solver of the simulated latency, with a proven lower bound (module docstring).

    Evaluations: HEFT's and the single-device placements, then the assembled placement; when memory can
    bind, also Baechi's m-TOPO, m-ETF and m-SCT placements, then the best feasible placement found.

    Args:
        max_segment: Largest segment solved whole before cutting at jumping edges.
        enumerate_limit: Largest number of a segment's placements to enumerate instead of a MILP.
        segment_time_limit: HiGHS's time limit per segment MILP, seconds.
        time_limit: Time limit of the whole method, seconds, on both paths: it stops within it plus the
            slack of one step (``docs/agents.md``) and reports the gap it proved (``timed_out`` says
            whether the limit stopped it).
        threads: HiGHS threads (``None``: its default).
    """

    name = "exact"
    track = "white-box"  # reads the cost model

    def __init__(
        self,
        max_segment: int = 40,
        enumerate_limit: int = 1 << 20,
        segment_time_limit: float = 60.0,
        time_limit: float = 600.0,
        threads: int | None = None,
    ) -> None:
        for key, value in {"segment_time_limit": segment_time_limit, "time_limit": time_limit}.items():
            if not value > 0:
                raise PlacementGymError(f"{key} must be > 0 seconds, got {value}")
        if max_segment < 1 or enumerate_limit < 1:
            raise PlacementGymError("max_segment and enumerate_limit must be >= 1")
        self.max_segment = max_segment
        self.enumerate_limit = enumerate_limit
        self.segment_time_limit = segment_time_limit
        self.time_limit = time_limit
        self.threads = threads

    def _candidates(self, cost: CostModel, allowed: np.ndarray, memory: bool) -> list[np.ndarray]:
        """HEFT's placement, Baechi's memory-aware ones when memory can bind, and every single device."""
        candidates = [heft_placement(cost, allowed)[0]]
        if memory:
            candidates += list(list_scheduler_placements(cost, allowed).values())
        return candidates + [
            np.full(cost.num_groups, d, dtype=np.int64)
            for d in range(cost.num_devices)
            if allowed[:, d].all()
        ]

    def _solve(
        self,
        cost: CostModel,
        allowed: np.ndarray,
        candidates: list[np.ndarray],
        memory: bool,
        deadline: Deadline,
    ) -> tuple[np.ndarray | None, float, float, bool, dict[str, Any]]:
        """Run the solver that fits: (placement, its latency, lower bound, whether a MILP ran, details)."""
        if memory:
            result = solve_with_memory(
                cost,
                allowed,
                candidates,
                time_limit=max(deadline.left(), 0.01),
                max_segment=self.max_segment,
                enumerate_limit=self.enumerate_limit,
                segment_time_limit=self.segment_time_limit,
                threads=self.threads,
            )
            details = {
                "solver": "lagrangian decomposition + milp (memory can bind)",
                "lagrangian_iterations": result.iterations,
                "milp_status": result.milp,
                # the whole-graph MILP was cut short, or skipped for want of time while a gap remained
                "timed_out": deadline.expired()
                or result.milp == "Time limit reached"
                or (result.milp is None and not result.lower_bound >= result.latency * (1 - 1e-6)),
            }
            return result.placement, result.latency, result.lower_bound, True, details
        result = solve_decomposed(
            cost,
            allowed,
            self.max_segment,
            self.enumerate_limit,
            self.segment_time_limit,
            self.threads,
            deadline=deadline,
        )
        details = {
            "solver": "decomposition",
            "segments": result.segments,
            "largest_segment": result.largest,
            "dropped_edges": result.dropped,
            "milp_segments": result.milp_segments,
            "assembled_latency": result.latency,
            "timed_out": result.timed_out,
        }
        return result.placement, result.latency, result.lower_bound, result.milp_segments > 0, details

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        deadline = Deadline.after(self.time_limit)
        cost = tracker.problem.cost_model()
        allowed = allowed_devices(tracker.problem)
        memory = memory_can_bind(cost)
        candidates = self._candidates(cost, allowed, memory)
        for placement in candidates:
            evaluate_within_budget(tracker, placement)
        start = time.perf_counter()
        solved = self._solve(cost, allowed, candidates, memory, deadline)
        placement, solved_latency, lower_bound, used_milp, details = solved
        solve_time = time.perf_counter() - start
        if placement is not None:
            evaluate_within_budget(tracker, placement)
        latency = min(solved_latency, tracker.best_latency)
        gap = max(0.0, (latency - lower_bound) / latency) if np.isfinite(latency) else 1.0
        # MILPs, whole-graph or per segment, do not model contention between devices that share hardware
        # (the local platform's virtual CPUs): their bounds then prove nothing.
        proven = not (np.any(cost.contention > 0) and used_milp)
        return {
            "solver": details.pop("solver"),
            "status": ("Optimal" if gap <= 1e-6 else "Bounded") if proven else "Unproven (contention)",
            "lower_bound": lower_bound if proven else float("nan"),
            "gap": gap if proven else float("nan"),
            "solve_time": solve_time,
            "time_limit": self.time_limit,
            **details,
        }
