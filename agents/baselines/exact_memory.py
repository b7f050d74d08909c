"""The exact solver when memory can bind: a Lagrangian relaxation of memory solved by the decomposition,
then the whole-graph MILP warm-started from the best placement and cut by the best bound.

The simulator's memory rule (:mod:`placement_gym.simulation.schedule`) is a peak over the whole schedule,
so it couples every segment of :mod:`agents.baselines.decomposition`. Three steps:

1. **Lagrangian bound.** At schedule position ``k`` a device holds at least ``M_d(k, p) = sum over its
   groups g of A[g, k]``: the weights, each output while it is live (from its producer's position to its
   last consumer's) and each graph input up to its consumer; the simulator also counts received copies,
   which are left out (so ``M`` is a lower bound of its liveness). Every feasible placement satisfies
   ``M_d(k, p) <= capacity_d`` for all ``d, k``, so for multipliers ``mu >= 0`` (seconds per byte)

       L(mu) = min_p [latency(p) + sum_{d,k} mu[d, k] M_d(k, p)] - sum_{d,k} mu[d, k] capacity_d

   is a lower bound of the optimum (Fisher, "The Lagrangian relaxation method for solving integer
   programming problems", Management Science 1981). The penalty is a sum over groups
   (``sum_k mu[d, k] A[g, k]`` for group ``g`` on ``d``), so the decomposition minimises it exactly
   (segment penalties; memory itself left out), and its lower bound of that minimum gives a lower bound of
   ``L(mu)``. The multipliers follow subgradient steps with Polyak's step length ``theta (UB - L) /
   ||s||^2``, ``s[d, k] = M_d(k, p_mu) - capacity_d``, halving ``theta`` after two iterations without a
   better bound.
2. **Placements.** Every placement a step produces, the caller's candidates (HEFT, Baechi's list
   schedulers) and a single-group-move descent from the best feasible one are run through the simulator with
   memory; the best feasible one is the upper bound.
3. **Whole-graph MILP.** If the gap is still above the target, the MILP of :mod:`agents.baselines.milp`
   (whose memory rows are the simulator's exact liveness) starts from that placement with the makespan
   bounded below by the best bound, for the time left; its dual bound and incumbent are used if better.

The bound is proven (``gap == 0``: optimal) whatever the step sizes do; only how close it gets depends on
them.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from agents.baselines.common import Deadline
from agents.baselines.milp import TIME_SCALE, build_milp
from agents.baselines.segment_solver import solve_decomposed
from placement_gym.simulation.cost_model import CostModel
from placement_gym.simulation.schedule import Schedule


@dataclass
class MemoryResult:
    """The result of :func:`solve_with_memory`.

    Attributes:
        placement: The best feasible placement found, shape ``(G,)`` (``None``: none is feasible).
        latency: Its simulated latency, seconds (``inf``: none).
        lower_bound: A proven lower bound of every feasible placement's latency, seconds.
        iterations: Lagrangian iterations run.
        milp: Status of the final whole-graph MILP, or ``None`` if it was not needed.
        seconds: Wall time.
    """

    placement: np.ndarray | None
    latency: float
    lower_bound: float
    iterations: int
    milp: str | None
    seconds: float

    @property
    def gap(self) -> float:
        if not np.isfinite(self.latency):
            return 1.0
        return max(0.0, (self.latency - self.lower_bound) / self.latency)


def resident_bytes(cost: CostModel, sched: Schedule) -> np.ndarray:
    """``A[g, k]``: bytes group ``g`` holds on its device at schedule position ``k`` whatever the other
    groups' devices (weights, its output while live, its graph input until it runs), shape ``(G, G)``."""
    k = np.arange(cost.num_groups)[None, :]  # (1, K)
    pos, last = sched.pos[:, None], sched.last_use[:, None]  # (G, 1)
    live = (pos <= k) & (k < last)
    waiting = k <= pos
    return cost.param_bytes[:, None] + cost.out_bytes[:, None] * live + cost.input_bytes[:, None] * waiting


def _descend(sched: Schedule, allowed: np.ndarray, placement: np.ndarray, latency: float, deadline: float):
    """Best-improvement descent over single-group moves, feasible placements only (the simulator decides)."""
    g_count, d_count = allowed.shape
    rows, devs = np.nonzero(allowed)
    while time.perf_counter() < deadline:
        batch = np.repeat(placement[None, :], len(rows), axis=0)  # (M, G)
        batch[np.arange(len(rows)), rows] = devs
        lat = sched.run_batch(batch)[0]  # infeasible moves are inf
        i = int(np.argmin(lat))
        if not lat[i] < latency * (1 - 1e-12):
            break
        placement, latency = batch[i].copy(), float(lat[i])
    return placement, latency


def solve_with_memory(
    cost: CostModel,
    allowed: np.ndarray,
    candidates: list[np.ndarray],
    time_limit: float = 600.0,
    target_gap: float = 1e-6,
    max_segment: int = 40,
    enumerate_limit: int = 1 << 20,
    segment_time_limit: float = 60.0,
    threads: int | None = None,
    lagrangian_share: float = 0.5,
) -> MemoryResult:
    """Best feasible placement and a proven lower bound when memory can bind (the module docstring).

    Args:
        cost: The cost model, with its capacities.
        allowed: Devices each group may use, shape ``(G, D)``, bool.
        candidates: Placements to start from (HEFT's, Baechi's...), each ``(G,)``; infeasible ones are
            ignored.
        time_limit: Seconds for the whole solve: every step's MILPs are capped by the time left, and the
            solve stops within it plus the slack of one step (``docs/agents.md``).
        target_gap: Stop when the relative gap is at most this.
        max_segment, enumerate_limit, segment_time_limit, threads: Settings of
            :func:`~agents.baselines.segment_solver.solve_decomposed`.
        lagrangian_share: Share of ``time_limit`` for the Lagrangian steps; the whole-graph MILP gets the rest.
    """
    start = time.perf_counter()
    deadline = start + time_limit
    lagrangian_deadline = start + lagrangian_share * time_limit
    allowed = allowed & np.isfinite(cost.compute)
    sched = Schedule.build(cost)
    free = dataclasses.replace(cost, capacity=np.full(cost.num_devices, np.inf))
    resident = resident_bytes(cost, sched)  # (G, K)
    capacity = np.where(np.isfinite(cost.capacity), cost.capacity, 0.0)[:, None]  # (D, 1)
    bounded = np.isfinite(cost.capacity)[:, None]  # (D, 1)

    best, best_latency = None, np.inf

    def offer(placement: np.ndarray) -> None:
        nonlocal best, best_latency
        latency = float(sched.run(np.asarray(placement, dtype=np.int64))[0])
        if latency < best_latency:
            best, best_latency = np.asarray(placement, dtype=np.int64).copy(), latency

    for placement in candidates:
        offer(placement)

    def gap(bound: float) -> float:
        return max(0.0, (best_latency - bound) / best_latency) if np.isfinite(best_latency) else 1.0

    mu = np.zeros((cost.num_devices, resident.shape[1]))  # (D, K) seconds per byte
    lower, theta, stale, iterations = 0.0, 1.0, 0, 0
    while time.perf_counter() < lagrangian_deadline and gap(lower) > target_gap and theta > 1e-3:
        iterations += 1
        penalty = resident @ mu.T  # (G, D)
        dec = solve_decomposed(
            free,
            allowed,
            max_segment,
            enumerate_limit,
            segment_time_limit,
            threads,
            penalty=penalty,
            deadline=Deadline(lagrangian_deadline),
        )
        if dec.placement is not None:
            offer(dec.placement)
        if dec.timed_out:  # a step cut short proves less than the steps before it: keep theirs
            break
        value = dec.lower_bound - float(np.sum(mu * capacity))
        if value > lower * (1 + 1e-9):
            lower, stale = value, 0
        else:
            stale += 1
            if stale >= 2:
                theta, stale = theta / 2, 0
        onehot = np.eye(cost.num_devices)[dec.placement]  # (G, D)
        sub = np.where(bounded, onehot.T @ resident - capacity, 0.0)  # (D, K) bytes
        sub = np.where((mu > 0) | (sub > 0), sub, 0.0)  # components that cannot move mu
        if not np.any(sub > 0) and np.allclose(mu * sub, 0.0):
            break  # the relaxed optimum fits and the multipliers are complementary
        norm = float(np.sum(sub * sub))
        if not np.isfinite(best_latency):
            scale = 1e-3 * max(dec.objective, 1e-9) / max(float(resident.max()), 1.0)
            mu = np.maximum(0.0, mu + scale * np.sign(sub))
        else:
            mu = np.maximum(0.0, mu + theta * (best_latency - value) / norm * sub)

    if best is not None:
        best, best_latency = _descend(sched, allowed, best, best_latency, deadline)

    milp_status = None
    left = deadline - time.perf_counter()
    if gap(lower) > target_gap and left > 1.0:
        milp_status, bound, incumbent = _milp(cost, allowed, best, lower, left, threads, Deadline(deadline))
        lower = max(lower, bound)
        if incumbent is not None:
            offer(incumbent)
    return MemoryResult(
        placement=best,
        latency=best_latency,
        lower_bound=min(lower, best_latency),
        iterations=iterations,
        milp=milp_status,
        seconds=time.perf_counter() - start,
    )


def _milp(
    cost: CostModel,
    allowed: np.ndarray,
    warm: np.ndarray | None,
    lower: float,
    time_limit: float,
    threads: int | None,
    deadline: Deadline,
) -> tuple[str, float, np.ndarray | None]:
    """The whole-graph MILP from ``warm`` with ``makespan >= lower``: (status, dual bound s, incumbent);
    HiGHS gets the time left after the model is built."""
    model = build_milp(cost, allowed)
    makespan = int(np.flatnonzero(np.asarray(model.builder.cost) == 1.0)[-1])  # the only objective column
    model.builder.lower[makespan] = max(model.builder.lower[makespan], lower * TIME_SCALE * (1 - 1e-9))
    h = model.builder.highs()
    h.setOptionValue("time_limit", deadline.cap(time_limit))
    h.setOptionValue("mip_rel_gap", 1e-6)
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    if warm is not None:
        cols = model.x[np.arange(cost.num_groups), warm]
        zeros = model.x[model.x >= 0]
        h.setSolution(len(zeros), zeros.astype(np.int32), np.isin(zeros, cols).astype(np.float64))
    h.run()
    info = h.getInfo()
    status = h.modelStatusToString(h.getModelStatus())
    bound = float(info.mip_dual_bound) / TIME_SCALE if status != "Infeasible" else np.inf
    incumbent = None
    if info.primal_solution_status == 2:
        values = np.asarray(h.getSolution().col_value)
        score = np.where(model.x >= 0, values[np.maximum(model.x, 0)], -1.0)  # (G, D)
        incumbent = np.argmax(score, axis=1).astype(np.int64)
    return status, bound, incumbent
