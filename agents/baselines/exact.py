"""An exact solver for the simulated latency: the schedule cut into segments, each solved exactly, joined by a
shortest path (dynamic programming over the cuts), with a proven lower bound.

How it works (the cuts and why they decompose the latency: :mod:`agents.baselines.decomposition`):

1. Cut the simulator's fixed priority order at groups that separate the schedule; if the largest segment
   would exceed ``max_segment`` groups, also cut where edges from one group jump over the cut (BERT's
   attention mask), dropping those edges from the segments' models (a relaxation).
2. For each segment, each device of its anchor (the previous cut's group) and each device of its last
   group, find the segment's shortest time: by enumerating every placement through the simulator itself
   when there are at most ``enumerate_limit`` of them, else with the MILP of
   :mod:`agents.baselines.milp` on the segment (its optimum and its dual bound).
3. A shortest path over ``(cut, device)`` gives a lower bound of the optimum (the sum of the segments'
   lower bounds; exact when nothing was dropped and every segment was solved) and a placement, which the
   simulator evaluates: the upper bound. The relative gap between them is reported; ``gap == 0`` is a proof
   of optimality.

When a segment has dropped edges and the platform has a device with an invoke overhead, the bound is the
smaller of two cases: the dropped edges' sources on devices without one (the models keep every overhead),
or not (the models of segments with dropped edges charge no invoke overhead at all).

The decomposition ignores memory: when some placement could overfill a device
(:func:`~agents.baselines.decomposition.memory_can_bind`), the solver falls back to the MILP of the whole
graph (:class:`~agents.baselines.milp.MILPPlacement`), whose memory rows are exact.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from agents.base import BudgetTracker, PlacementMethod
from agents.baselines.common import allowed_devices, env_cost_model, evaluate_within_budget
from agents.baselines.decomposition import (
    Segment,
    SegmentModel,
    memory_can_bind,
    segment_model,
    segments,
)
from agents.baselines.heft import heft_placement
from agents.baselines.milp import TIME_SCALE, MILPPlacement, build_milp
from placement_gym.errors import PlacementGymError
from placement_gym.simulation.cost_model import CostModel
from placement_gym.simulation.schedule import Schedule


@dataclass
class SegmentSolution:
    """Shortest times of one segment per (anchor device, end device).

    Attributes:
        best: Seconds of the best placement found, shape ``(D, D)`` (anchor device, end device); row 0
            only for the first segment; ``inf`` where none exists.
        bound: A lower bound of each entry of ``best``, shape ``(D, D)``.
        placements: The segment's groups' devices of each entry, keyed by ``(anchor device, end device)``.
        solver: ``"enumeration"`` or ``"milp"``.
    """

    best: np.ndarray
    bound: np.ndarray
    placements: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    solver: str = "enumeration"


def _solve_by_enumeration(model: SegmentModel, allowed: np.ndarray, anchor_device: int) -> SegmentSolution:
    """Every placement of the segment's own groups through the simulator."""
    cost = model.cost
    d_count = cost.num_devices
    free = [i for i in range(cost.num_groups) if i != model.anchor]
    choices = [np.flatnonzero(allowed[i]).tolist() for i in free]
    grid = np.array(list(itertools.product(*choices)), dtype=np.int64).reshape(-1, len(free))  # (B, g)
    full = np.empty((len(grid), cost.num_groups), dtype=np.int64)
    full[:, free] = grid
    if model.anchor >= 0:
        full[:, model.anchor] = anchor_device
    latency, _, _ = model.schedule.run_batch(full)
    latency = latency - model.offset(anchor_device)
    row = max(anchor_device, 0)
    best = np.full((d_count, d_count), np.inf)
    solution = SegmentSolution(best, best.copy())
    for d in range(d_count):
        rows = np.flatnonzero(full[:, model.end] == d)
        if len(rows):
            i = rows[np.argmin(latency[rows])]
            best[row, d] = solution.bound[row, d] = latency[i]
            solution.placements[(row, d)] = full[i]
    return solution


def _solve_by_milp(
    model: SegmentModel, allowed: np.ndarray, anchor_device: int, time_limit: float, threads: int | None
) -> SegmentSolution:
    """One MILP per end device, the anchor pinned to ``anchor_device``."""
    cost = model.cost
    d_count = cost.num_devices
    row = max(anchor_device, 0)
    solution = SegmentSolution(np.full((d_count, d_count), np.inf), np.full((d_count, d_count), np.inf))
    solution.solver = "milp"
    for d in np.flatnonzero(allowed[model.end]).tolist():
        mask = allowed.copy()
        mask[model.end] = False
        mask[model.end, d] = True
        milp = build_milp(cost, mask, model.schedule.order)
        h = milp.builder.highs()
        h.setOptionValue("time_limit", float(time_limit))
        h.setOptionValue("mip_rel_gap", 1e-9)
        if threads is not None:
            h.setOptionValue("threads", int(threads))
        h.run()
        status = h.modelStatusToString(h.getModelStatus())
        if status == "Infeasible":
            continue
        info = h.getInfo()
        solution.bound[row, d] = float(info.mip_dual_bound) / TIME_SCALE - model.offset(anchor_device)
        if info.primal_solution_status == 2:
            values = np.asarray(h.getSolution().col_value)
            score = np.where(milp.x >= 0, values[np.maximum(milp.x, 0)], -1.0)  # (g, D)
            placement = np.argmax(score, axis=1).astype(np.int64)
            latency = model.schedule.run(placement)[0] - model.offset(anchor_device)
            solution.best[row, d] = latency
            solution.placements[(row, d)] = placement
    return solution


@dataclass
class Decomposition:
    """The result of :func:`solve_decomposed`.

    Attributes:
        placement: The assembled placement, shape ``(G,)``.
        latency: Its simulated latency (seconds).
        lower_bound: A proven lower bound of every placement's simulated latency (seconds).
        segments: Number of segments.
        largest: Groups in the largest segment.
        dropped: Edges dropped from the segments' models.
        milp_segments: Segments solved by MILP rather than enumeration.
    """

    placement: np.ndarray
    latency: float
    lower_bound: float
    segments: int
    largest: int
    dropped: int
    milp_segments: int

    @property
    def gap(self) -> float:
        return max(0.0, (self.latency - self.lower_bound) / self.latency)


def _shortest_path(solutions: list[SegmentSolution], table: str) -> tuple[float, list[tuple[int, int]]]:
    """Shortest path over ``(cut, device)`` through the segments' ``table`` (``best`` or ``bound``): its
    length and the (anchor device, end device) of each segment on it."""
    first = getattr(solutions[0], table)[0]  # (D,) by end device
    value, back = first.copy(), []
    for sol in solutions[1:]:
        cand = value[:, None] + getattr(sol, table)  # (D anchor, D end)
        back.append(np.argmin(cand, axis=0))
        value = cand.min(axis=0)
    end = int(np.argmin(value))
    path = [end]
    for arg in reversed(back):
        path.append(int(arg[path[-1]]))
    path.reverse()  # end device of each segment
    pairs = [(0, path[0])] + [(path[i - 1], path[i]) for i in range(1, len(path))]
    return float(value[end]), pairs


def solve_decomposed(
    cost: CostModel,
    allowed: np.ndarray,
    max_segment: int = 40,
    enumerate_limit: int = 1 << 16,
    segment_time_limit: float = 60.0,
    threads: int | None = None,
) -> Decomposition:
    """The exact solver on ``cost`` (see the module docstring).

    Args:
        cost: The cost model (memory must not be able to bind: :func:`memory_can_bind`).
        allowed: Devices each group may use, shape ``(G, D)``, bool.
        max_segment: Largest segment worth solving whole before cutting at jumping edges.
        enumerate_limit: Largest number of placements of a segment to enumerate rather than solve by MILP.
        segment_time_limit: HiGHS's time limit per segment MILP (a segment stopped by it gives a bound).
        threads: HiGHS threads.
    """
    sched = Schedule.build(cost)
    allowed = allowed & np.isfinite(cost.compute)
    parts: list[Segment] = []
    for max_dropped in range(3):
        parts = segments(cost, sched, max_dropped)
        if max(len(s.groups) for s in parts) <= max_segment:
            break
    invoke = cost.invoke_overhead > 0
    sources = sorted({s for seg in parts for s, _ in seg.dropped})
    cases = [(np.zeros(cost.num_devices, dtype=bool), None)]
    if sources and invoke.any():
        cases = [(np.zeros(cost.num_devices, dtype=bool), ~invoke), (invoke.copy(), None)]

    best_bound, best_latency, best_placement, milp_segments = np.inf, np.inf, None, 0
    for free_invoke, source_devices in cases:
        mask = allowed.copy()
        if source_devices is not None:
            mask[sources] &= source_devices
        if not mask.any(axis=1).all():
            continue
        solutions = []
        for seg in parts:
            model = segment_model(cost, sched, seg, free_invoke)
            sub_allowed = mask[model.groups]
            anchors = np.flatnonzero(mask[seg.anchor]).tolist() if seg.anchor >= 0 else [-1]
            if model.anchor >= 0:
                sub_allowed[model.anchor] = True  # pinned per anchor device below
            count = int(
                np.prod([sub_allowed[i].sum() for i in range(len(model.groups)) if i != model.anchor])
            )
            merged = SegmentSolution(
                np.full((cost.num_devices,) * 2, np.inf), np.full((cost.num_devices,) * 2, np.inf)
            )
            for a in anchors:
                pinned = sub_allowed.copy()
                if model.anchor >= 0:
                    pinned[model.anchor] = False
                    pinned[model.anchor, a] = True
                if count <= enumerate_limit:
                    sol = _solve_by_enumeration(model, pinned, a)
                else:
                    sol = _solve_by_milp(model, pinned, a, segment_time_limit, threads)
                    merged.solver = "milp"
                row = max(a, 0)
                merged.best[row], merged.bound[row] = sol.best[row], sol.bound[row]
                merged.placements.update(sol.placements)
            milp_segments += merged.solver == "milp"
            solutions.append((model, merged))
        bound, _ = _shortest_path([s for _, s in solutions], "bound")
        _, pairs = _shortest_path([s for _, s in solutions], "best")
        placement = np.full(cost.num_groups, -1, dtype=np.int64)
        for (model, sol), pair in zip(solutions, pairs):
            sub = sol.placements[pair]
            own = [i for i in range(len(model.groups)) if i != model.anchor]
            placement[model.groups[own]] = sub[own]
        latency = float(sched.run(placement)[0])
        best_bound = min(best_bound, bound)
        if latency < best_latency:
            best_latency, best_placement = latency, placement
    if best_placement is None:
        raise PlacementGymError("the exact solver found no placement: some group has no allowed device")
    return Decomposition(
        placement=best_placement,
        latency=best_latency,
        lower_bound=best_bound,
        segments=len(parts),
        largest=max(len(s.groups) for s in parts),
        dropped=sum(len(s.dropped) for s in parts),
        milp_segments=milp_segments,
    )


class ExactPlacement(PlacementMethod):
    """The decomposed exact solver of the simulated latency, with a proven lower bound (module docstring).

    Evaluations: HEFT's and the single-device placements, then the assembled placement (or, when memory
    can bind, the whole-graph MILP's evaluations).

    Args:
        max_segment: Largest segment solved whole before cutting at jumping edges.
        enumerate_limit: Largest number of a segment's placements to enumerate instead of a MILP.
        segment_time_limit: HiGHS's time limit per segment MILP, seconds.
        time_limit: Time limit of the whole-graph MILP when memory can bind, seconds.
        threads: HiGHS threads (``None``: its default).
    """

    name = "exact"

    def __init__(
        self,
        max_segment: int = 40,
        enumerate_limit: int = 1 << 16,
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

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        cost = env_cost_model(env)
        allowed = allowed_devices(env)
        if memory_can_bind(cost):
            milp = MILPPlacement(time_limit=self.time_limit, threads=self.threads)
            extra = milp._place(env, tracker, seed)
            bound = extra["dual_bound"]
            gap = max(0.0, 1.0 - bound / tracker.best_latency) if np.isfinite(tracker.best_latency) else 1.0
            return {**extra, "solver": "milp (memory can bind)", "lower_bound": bound, "gap": gap}
        for placement in [heft_placement(cost, allowed)[0]] + [
            np.full(cost.num_groups, d, dtype=np.int64)
            for d in range(cost.num_devices)
            if allowed[:, d].all()
        ]:
            evaluate_within_budget(tracker, placement)
        start = time.perf_counter()
        result = solve_decomposed(
            cost, allowed, self.max_segment, self.enumerate_limit, self.segment_time_limit, self.threads
        )
        solve_time = time.perf_counter() - start
        evaluate_within_budget(tracker, result.placement)
        latency = min(result.latency, tracker.best_latency)
        gap = max(0.0, (latency - result.lower_bound) / latency)
        return {
            "solver": "decomposition",
            "status": "Optimal" if gap <= 1e-9 else "Bounded",
            "lower_bound": result.lower_bound,
            "gap": gap,
            "solve_time": solve_time,
            "segments": result.segments,
            "largest_segment": result.largest,
            "dropped_edges": result.dropped,
            "milp_segments": result.milp_segments,
            "assembled_latency": result.latency,
        }
