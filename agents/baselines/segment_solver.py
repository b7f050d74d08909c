"""The decomposed exact solver of the simulated latency: the schedule cut into segments, each solved exactly, joined by a
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

When edges were dropped and the platform has a device with an invoke overhead, the bound is the smallest
over cases: the dropped edges' sources all on devices without one (the segments' models keep every
overhead: a dropped edge then never joins two subgraphs that pay one); with one source, that source on each
device ``v`` with one (the models keep the overheads and count the subgraphs the source's edges join as
started on ``v``: :func:`~agents.baselines.decomposition.segment_model`; the shortest path then runs over
``(cut, device, status)``, the status saying whether the cut group's subgraph joins the source's:
:mod:`agents.baselines.mask_status`); with several, any devices (the models charge no invoke overhead at
all). Segments whose models are identical (BERT's layers) share one table. Cuts with jumping edges are used only inside segments of the clean cuts that exceed
``max_segment``, which keeps the sources few (BERT: the attention mask alone). The second case stops as soon as its bound reaches the first case's
placement.

The segments' MILPs do not model contention between devices that share hardware (the ``local``
platform's virtual CPUs; enumerated segments do, through the simulator): with contention and a MILP
segment the result is reported unproven.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields

import numpy as np

from agents.baselines.common import NO_DEADLINE, Deadline
from agents.baselines.decomposition import (
    Segment,
    SegmentModel,
    segment_model,
    segments,
)
from agents.baselines.mask_status import StatusTable
from agents.baselines.milp import TIME_SCALE, build_milp
from placement_gym.errors import PlacementGymError
from placement_gym.simulation.cost_model import CostModel
from placement_gym.simulation.schedule import Schedule


class SegmentTable:
    """What is known of one segment's shortest times, per (anchor device, end device) pair.

    The first segment has no anchor and uses row 0 only. Pairs are solved lazily (:meth:`refine`): a MILP
    over many pairs at once bounds them all from below, and a pair is solved on its own only when the
    shortest path over the bounds goes through it.

    Attributes:
        best: Seconds of the best placement found for each pair, shape ``(D, D)`` (``inf``: none yet).
        bound: A lower bound of each pair's shortest time, shape ``(D, D)``.
        placements: The segment model's placement of each pair in ``best``.
        solver: ``"enumeration"`` or ``"milp"``.
    """

    def __init__(
        self,
        model: SegmentModel,
        allowed: np.ndarray,
        enumerate_limit: int,
        time_limit: float,
        threads: int | None,
        deadline: Deadline = NO_DEADLINE,
    ) -> None:
        self.model, self.allowed = model, allowed  # allowed: (g, D), the anchor's row its possible devices
        self.time_limit, self.threads, self.deadline = time_limit, threads, deadline
        d_count = model.cost.num_devices
        self.best = np.full((d_count, d_count), np.inf)
        self.bound = np.zeros((d_count, d_count))
        self.placements: dict[tuple[int, int], np.ndarray] = {}
        self.level = np.zeros((d_count, d_count), dtype=np.int64)  # 1 all pairs, 2 anchor, 3 pair solved
        self.anchors = np.flatnonzero(allowed[model.anchor]).tolist() if model.anchor >= 0 else [None]
        own = [i for i in range(len(model.groups)) if i != model.anchor]
        count = float(np.prod([allowed[i].sum() for i in own], dtype=np.float64))
        if count <= enumerate_limit:
            self.solver = "enumeration"
            for a in self.anchors:
                self._enumerate(a)
            self.level[:] = 3
        else:
            self.solver = "milp"
            self._solve(None, None)
            self.level[:] = 1 if model.anchor >= 0 else 2

    @property
    def settled(self) -> np.ndarray:
        """Pairs solved (best found within 1e-7 of the bound: the MILP's tolerances) or past refining (their own
        MILP ran), shape ``(D, D)``, bool."""
        return (self.best <= self.bound + 1e-7 * np.abs(self.bound) + 1e-15) | (self.level >= 3)

    def _record(self, placement: np.ndarray, latency: float) -> None:
        row = int(placement[self.model.anchor]) if self.model.anchor >= 0 else 0
        pair = (row, int(placement[self.model.end]))
        if latency < self.best[pair]:
            self.best[pair] = latency
            self.placements[pair] = placement

    def _enumerate(self, anchor: int | None) -> None:
        """Every placement of the segment's own groups (the anchor on ``anchor``) through the simulator."""
        model = self.model
        g = len(model.groups)
        rows = [
            self.allowed[i] if i != model.anchor else np.eye(self.allowed.shape[1], dtype=bool)[anchor]
            for i in range(g)
        ]
        choices = [np.flatnonzero(r) for r in rows]
        sizes = [len(c) for c in choices]
        total = int(np.prod(sizes))
        row = anchor if anchor is not None else 0
        self.bound[row] = np.inf  # pairs with no placement stay infinite
        for lo in range(0, total, 1 << 18):
            if lo and self.deadline.expired():  # stopped part-way: nothing is proven of this row
                self.bound[row] = 0.0
                return
            index = np.unravel_index(np.arange(lo, min(total, lo + (1 << 18))), sizes)
            block = np.stack([c[i] for c, i in zip(choices, index)], axis=1).astype(np.int64)  # (B, g)
            latency = model.schedule.run_batch(block)[0] - (
                model.offset(anchor) if anchor is not None else 0.0
            )
            latency = latency + model.penalties(block)
            ends = block[:, model.end]
            for d in np.unique(ends).tolist():
                rows_d = np.flatnonzero(ends == d)
                i = rows_d[np.argmin(latency[rows_d])]
                self._record(block[i], float(latency[i]))
        self.bound[row] = self.best[row]

    def _solve(self, anchor: int | None, end: int | None) -> None:
        """MILP of the segment with the anchor and the end pinned (or free when ``None``); bounds every pair
        it covers and records its placement."""
        model = self.model
        mask = self.allowed.copy()
        if anchor is not None:
            mask[model.anchor] = False
            mask[model.anchor, anchor] = True
        if end is not None:
            mask[model.end] = False
            mask[model.end, end] = True
        milp = build_milp(model.cost, mask, model.schedule.order, model.schedule.prepaid)
        for i, d in zip(*np.nonzero((milp.x >= 0) & (model.penalty != 0))):
            milp.builder.cost[int(milp.x[i, d])] += float(model.penalty[i, d]) * TIME_SCALE
        h = milp.builder.highs()
        h.setOptionValue("time_limit", self.deadline.cap(self.time_limit))
        h.setOptionValue("mip_rel_gap", 1e-9)
        if self.threads is not None:
            h.setOptionValue("threads", int(self.threads))
        h.run()
        info = h.getInfo()
        infeasible = h.modelStatusToString(h.getModelStatus()) == "Infeasible"
        dual = np.inf if infeasible else float(info.mip_dual_bound) / TIME_SCALE
        anchors = [anchor] if anchor is not None else self.anchors
        ends = [end] if end is not None else list(range(mask.shape[1]))
        for a in anchors:
            row = a if a is not None else 0
            offset = model.offset(a) if a is not None else 0.0
            for b in ends:
                self.bound[row, b] = max(self.bound[row, b], dual - offset)
        if not infeasible and info.primal_solution_status == 2:
            values = np.asarray(h.getSolution().col_value)
            score = np.where(milp.x >= 0, values[np.maximum(milp.x, 0)], -1.0)  # (g, D)
            placement = np.argmax(score, axis=1).astype(np.int64)
            a = int(placement[model.anchor]) if model.anchor >= 0 else None
            offset = model.offset(a) if a is not None else 0.0
            value = float(model.schedule.run(placement)[0]) - offset + float(model.penalties(placement))
            self._record(placement, value)

    def placement(self, row: int, end: int) -> np.ndarray:
        """The model placement of the best time of pair ``(row, end)``."""
        return self.placements[(row, end)]

    def refine(self, row: int, end: int) -> bool:
        """Learn more about pair ``(row, end)``; False if nothing more can be learnt (solved, or its own
        MILP stopped at the time limit, or the deadline has passed)."""
        if self.settled[row, end] or self.deadline.expired():
            return False
        if self.level[row, end] < 2:
            self._solve(row, None)
            self.level[row] = np.maximum(self.level[row], 2)
        else:
            self._solve(row if self.model.anchor >= 0 else None, end)
            self.level[row, end] = 3
        return True


@dataclass
class Decomposition:
    """The result of :func:`solve_decomposed`.

    Attributes:
        placement: The assembled placement, shape ``(G,)``.
        latency: Its simulated latency (seconds).
        lower_bound: A proven lower bound of every placement's objective (seconds): the simulated latency,
            plus the penalty when one was given.
        objective: The placement's latency plus its penalty (seconds; the latency when no penalty).
        segments: Number of segments.
        largest: Groups in the largest segment.
        dropped: Edges dropped from the segments' models.
        milp_segments: Segments solved by MILP rather than enumeration.
        timed_out: Whether the deadline stopped the solve (the bound is then weaker, and ``placement`` is
            None if no whole placement was assembled).
    """

    placement: np.ndarray | None
    latency: float
    lower_bound: float
    segments: int
    largest: int
    dropped: int
    milp_segments: int
    objective: float = float("nan")
    timed_out: bool = False

    @property
    def gap(self) -> float:
        if not np.isfinite(self.objective):
            return 1.0
        return max(0.0, (self.objective - self.lower_bound) / self.objective)


def _model_key(model: SegmentModel, allowed: np.ndarray) -> bytes:
    """A digest of everything a :class:`SegmentTable` depends on: segments with equal keys (BERT's twelve
    identical layers) share one table."""
    digest = hashlib.sha256()
    parts = [getattr(model.cost, f.name) for f in fields(model.cost) if f.name != "meta"]
    parts += [model.schedule.order, model.schedule.prepaid, model.penalty, allowed, model.anchor, model.end]
    for part in parts:
        digest.update(repr(part).encode() if not isinstance(part, np.ndarray) else part.tobytes())
        digest.update(repr(np.shape(part)).encode())
    return digest.digest()


def _table(shared: dict, model: SegmentModel, mask: np.ndarray, limits: tuple) -> SegmentTable:
    """The table of ``model`` (groups allowed by ``mask``, shape ``(G, D)``), built once per distinct
    model in ``shared``; ``limits``: enumerate limit, segment time limit, threads."""
    key = _model_key(model, mask[model.groups])
    if key not in shared:
        shared[key] = SegmentTable(model, mask[model.groups], *limits)
    return shared[key]


def _shortest_path(tables: list[np.ndarray]) -> tuple[float, list[tuple[int, int]]]:
    """Shortest path over ``(cut, device)`` through the segments' times ``tables`` (each ``(D, D)``, anchor
    device by end device; the first segment's row 0): its length and the pair of each segment on it."""
    value, back = tables[0][0].copy(), []
    for table in tables[1:]:
        cand = value[:, None] + table  # (D anchor, D end)
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
    enumerate_limit: int = 1 << 20,
    segment_time_limit: float = 60.0,
    threads: int | None = None,
    penalty: np.ndarray | None = None,
    deadline: Deadline = NO_DEADLINE,
) -> Decomposition:
    """The exact solver on ``cost`` (see the module docstring).

    Args:
        cost: The cost model (memory must not be able to bind: :func:`memory_can_bind`).
        allowed: Devices each group may use, shape ``(G, D)``, bool.
        max_segment: Largest segment worth solving whole before cutting at jumping edges.
        enumerate_limit: Largest number of placements of a segment to enumerate rather than solve by MILP.
        segment_time_limit: HiGHS's time limit per segment MILP (a segment stopped by it gives a bound).
        threads: HiGHS threads.
        penalty: Seconds added to the objective per (group, device), shape ``(G, D)``; the solver then
            minimises latency plus penalty (``None``: latency alone).
        deadline: When to stop: no MILP runs past it (each is capped by the time left), refining stops,
            and the bound keeps what was proven (a case or segment not reached bounds nothing: 0).
    """
    sched = Schedule.build(cost)
    pen = np.zeros((cost.num_groups, cost.num_devices)) if penalty is None else np.asarray(penalty, float)

    def objective(placement: np.ndarray) -> tuple[float, float]:
        latency = float(sched.run(placement)[0])
        return latency + float(pen[np.arange(cost.num_groups), placement].sum()), latency

    allowed = allowed & np.isfinite(cost.compute)
    parts: list[Segment] = []
    for max_dropped in range(3):
        parts = segments(cost, sched, max_dropped, max_segment)
        if max(len(s.groups) for s in parts) <= max_segment:
            break
    invoke = cost.invoke_overhead > 0
    sources = sorted({s for seg in parts for s, _ in seg.dropped})
    none = np.zeros(cost.num_devices, dtype=bool)
    cases: list[tuple[np.ndarray, np.ndarray | None, int | None]] = [(none, None, None)]
    if sources and invoke.any():
        # the complement of "every source on a device without an overhead": with one source, that source
        # on each device with one in turn (its targets' subgraphs prepaid there); with several, any devices
        cases = [(none, ~invoke, None)]
        if len(sources) == 1:
            cases += [(none, np.arange(cost.num_devices) == v, int(v)) for v in np.flatnonzero(invoke)]
        else:
            cases.append((invoke.copy(), None, None))

    best_bound, best_value, best_latency, best_placement, milp_segments = np.inf, np.inf, np.inf, None, 0
    timed_out = False
    for free_invoke, source_devices, prepaid in cases:
        if deadline.expired():  # a case not reached proves nothing
            timed_out, best_bound = True, min(best_bound, 0.0)
            break
        mask = allowed.copy()
        if source_devices is not None:
            mask[sources] &= source_devices
        if not mask.any(axis=1).all():
            continue
        tables, models, shared = [], [], {}
        limits = (enumerate_limit, segment_time_limit, threads, deadline)
        for seg in parts:
            if deadline.expired():
                break
            model = segment_model(cost, sched, seg, free_invoke, penalty, prepaid)
            models.append(model)
            if prepaid is None:
                tables.append(_table(shared, model, mask, limits))
                continue
            # the source on an invoke device: a status per cut (agents.baselines.mask_status)
            source = sources[0]
            home = source in seg.groups
            before = any(source in later.groups for later in parts[parts.index(seg) + 1 :])
            variants = (
                model,
                segment_model(
                    cost, sched, seg, free_invoke, penalty, prepaid, (seg.end, source) if home else (seg.end,)
                ),
            )
            if home:  # the source's segment: also each part alone counted as started
                variants += tuple(
                    segment_model(cost, sched, seg, free_invoke, penalty, prepaid, (g,))
                    for g in (source, seg.end)
                )
            local = {int(g): i for i, g in enumerate(model.groups)}
            heads = [local[source]] if home else [] if before else sorted({local[t] for _, t in seg.dropped})
            own_mask = mask[model.groups]
            key = (*(_model_key(m, own_mask) for m in variants), tuple(heads), seg.last)
            if key not in shared:
                own = own_mask[[i for i in range(len(model.groups)) if i != model.anchor]]
                pair = None
                if float(np.prod(own.sum(axis=1), dtype=np.float64)) > enumerate_limit:
                    # variant 2 prices a pending anchor: none in a segment without one
                    pair = tuple(
                        _table(shared, m, mask, limits) if i < 2 or model.anchor >= 0 else None
                        for i, m in enumerate(variants[:3])
                    )
                shared[key] = StatusTable(variants, own_mask, prepaid, heads, seg.last, pair)
            tables.append(shared[key])
        if len(tables) < len(parts):  # the deadline passed while the tables were built
            timed_out, best_bound = True, min(best_bound, 0.0)
            break
        milp_segments = max(milp_segments, sum(t.solver == "milp" for t in tables))
        while True:  # refine the pairs on the shortest path over the bounds until they are all solved
            bound, pairs = _shortest_path([t.bound for t in tables])
            if bound >= best_value:  # this case cannot beat a placement of an earlier case
                break
            if not any([t.refine(*pair) for t, pair in zip(tables, pairs)]):
                break
        timed_out |= deadline.expired()
        best_bound = min(best_bound, bound)
        if bound >= best_value:
            continue
        reachable, pairs = _shortest_path([t.best for t in tables])
        if not np.isfinite(reachable):  # stopped before every segment had a placement
            continue
        placement = np.full(cost.num_groups, -1, dtype=np.int64)
        for solved, model, pair in zip(tables, models, pairs):
            sub = solved.placement(*pair)
            own = [i for i in range(len(model.groups)) if i != model.anchor]
            placement[model.groups[own]] = sub[own]
        value, latency = objective(placement)
        if value < best_value:
            best_value, best_latency, best_placement = value, latency, placement
    if best_placement is None and not timed_out:
        raise PlacementGymError("the exact solver found no placement: some group has no allowed device")
    return Decomposition(
        placement=best_placement,
        latency=best_latency,
        lower_bound=best_bound,
        segments=len(parts),
        largest=max(len(s.groups) for s in parts),
        dropped=sum(len(s.dropped) for s in parts),
        milp_segments=milp_segments,
        objective=best_value,
        timed_out=timed_out,
    )
