"""An exact MILP of the simulated backend, solved with HiGHS (in the spirit of Moirai's and Tarnawski et
al.'s (NeurIPS 2020) exact formulations; Moirai's MILP is described in :mod:`agents.systems.moirai`).

The model reproduces the list schedule of :mod:`placement_gym.simulation.schedule` for every placement, so
its optimum is the best placement *according to the simulator*. The simulator's rules and how each is
modelled (times in microseconds, memory in KiB, so that HiGHS's tolerances stay far below the costs):

* **Assignment**: ``x[g, d]`` binary, one device per group; devices with a non-finite cost or masked out
  by the env are fixed to 0.
* **Fixed priority order**: the simulator takes groups in one placement-independent order (decreasing
  upward rank, :class:`~placement_gym.simulation.schedule.Schedule`) and each device runs its groups in that
  order without insertion. So no ordering binaries are needed: the MILP carries a "device free at" state
  per device along the order (``F_k[d] >= F_{k-1}[d]``, ``F_k[d] >= C[g] - M (1 - x[g, d])``) and a group
  starts after the state of its device (``S[g] >= F_{k-1}[d] - M (1 - x[g, d])``).
* **Links**: every transfer is an event of one fixed global sequence (per group in order: the graph-input
  copy from the host, then its incoming edges in the simulator's CSR order, then, after the group, the
  result copy to the host). Each link is a FIFO in that sequence, modelled by a "link free at" state per
  link carried along the events. An edge ``p -> g`` uses link ``(a, b)`` iff ``y[e, a, b] = x[p, a]
  x[g, b] = 1`` (linearised ``y >= x[p, a] + x[g, b] - 1``); it arrives at
  ``max(C[p], link free) + latency + bytes / bandwidth``; on one device it arrives at ``C[p]``.
* **Host I/O**: graph inputs start on the host and results go back to it, through the same link states.
* **Invoke overhead** (devices with ``invoke_overhead > 0`` only): the simulator charges it once per
  connected component of the groups a device runs, to the component's first group in the order. The
  MILP charges it to groups with ``pay[g, d] = 1`` and forces the first group of every component to pay:
  a non-paying group must point (binary ``z``) to a same-device neighbour, pointers form a forest
  (MTZ potentials ``u``), every pointer chain ends at a paying group, and a label ``r`` copied along
  pointers (the position of that payer) must be smaller than the non-payer's own position. The first
  group of a component has nothing earlier to reach, so it pays; every other group can point along a
  spanning tree to it, so it need not. A cut tightens the relaxation: a group on such a device has a payer
  there at or before its position (``sum pay >= x``; valid for binary ``x``, it let HiGHS prove BERT's
  first segment on ``multi-accel`` in 91 s at load 9-10; without it HiGHS had not after 5 minutes).
* **Memory**: for each device whose capacity the model could exceed at all, one row per schedule position
  with the simulator's exact liveness (weights, activations from their producer's position to their last
  consumer's, graph inputs up to their consumer, received copies from after the producer to the
  consumer), using ``w[e, d] >= x[t, d] - x[s, d]`` for a copy of edge ``s -> t`` into ``d``.
* **Objective**: the makespan ``T >= C[g]`` and ``T >=`` the arrival of every result copy.

Why the optimum equals the simulator's: every time constraint is a lower bound built from ``max`` and
``+``, so for a fixed placement the smallest feasible times are exactly the simulator's event times
(which respect the bounds ``M``, a sum of all durations), any other feasible times are later, and the
makespan is minimised. The invoke-overhead and memory parts are exact for binary ``x``. The only gap
to the simulator is numerical (HiGHS's feasibility tolerance, 1e-7 us) and the MIP gap the solver
reaches within its time limit, reported in ``extra``. The tests compare the MILP with an enumeration of
all ``D ** G`` placements on small graphs, including the 4-device platform with an NPU invoke overhead.

The solver starts from the best of the HEFT placement and the single-device placements (a warm start,
given to HiGHS through ``setSolution`` on the assignment variables), and the method always returns the
best evaluated placement, so a timed-out solve is never worse than HEFT.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import highspy
import numpy as np

from agents.base import BudgetTracker, PlacementMethod
from agents.baselines.common import allowed_devices, evaluate_within_budget
from agents.baselines.heft import heft_placement
from placement_gym.errors import PlacementGymError
from placement_gym.simulation.cost_model import CostModel
from placement_gym.simulation.schedule import Schedule

TIME_SCALE = 1e6  # seconds -> microseconds
MEMORY_SCALE = 1.0 / 1024  # bytes -> KiB


@dataclass
class _Builder:
    """Columns and rows of a MILP, collected before handing them to HiGHS in one call."""

    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    integer: list[int] = field(default_factory=list)
    row_lower: list[float] = field(default_factory=list)
    row_upper: list[float] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    index: list[int] = field(default_factory=list)
    value: list[float] = field(default_factory=list)

    def var(self, lower: float = 0.0, upper: float = np.inf, cost: float = 0.0, integer: bool = False) -> int:
        self.lower.append(lower)
        self.upper.append(upper)
        self.cost.append(cost)
        if integer:
            self.integer.append(len(self.lower) - 1)
        return len(self.lower) - 1

    def row(self, terms: list[tuple[int, float]], lower: float = -np.inf, upper: float = np.inf) -> None:
        merged: dict[int, float] = {}
        for i, v in terms:
            merged[i] = merged.get(i, 0.0) + v
        self.starts.append(len(self.index))
        self.index += list(merged)
        self.value += list(merged.values())
        self.row_lower.append(lower)
        self.row_upper.append(upper)

    def highs(self) -> highspy._Highs:
        """The model as a silent HiGHS instance: the solver core, since ``highspy.Highs()`` prints HiGHS's
        licence banner while it is built, before an option can turn output off (the project uses none of
        the wrapper's additions: callbacks, expressions)."""
        h = highspy._Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("log_to_console", False)
        n = len(self.lower)
        h.addVars(n, np.array(self.lower), np.array(self.upper))
        h.changeColsCost(n, np.arange(n, dtype=np.int32), np.array(self.cost))
        if self.integer:
            idx = np.array(self.integer, dtype=np.int32)
            h.changeColsIntegrality(len(idx), idx, np.full(len(idx), highspy.HighsVarType.kInteger))
        h.addRows(
            len(self.row_lower),
            np.array(self.row_lower),
            np.array(self.row_upper),
            len(self.index),
            np.array(self.starts, dtype=np.int32),
            np.array(self.index, dtype=np.int32),
            np.array(self.value),
        )
        return h


@dataclass
class PlacementMILP:
    """The MILP of one cost model, ready to solve.

    Attributes:
        builder: Its columns and rows.
        x: Column of ``x[g, d]``, shape ``(G, D)``, -1 where the device is not allowed.
        big_m: The big-M constant (microseconds), an upper bound of every event time.
    """

    builder: _Builder
    x: np.ndarray
    big_m: float

    @property
    def num_vars(self) -> int:
        return len(self.builder.lower)

    @property
    def num_rows(self) -> int:
        return len(self.builder.row_lower)


def build_milp(
    cost: CostModel, allowed: np.ndarray, order: np.ndarray | None = None, prepaid: np.ndarray | None = None
) -> PlacementMILP:
    """Formulate the simulator's schedule of ``cost`` as a MILP (see the module docstring).

    Args:
        cost: The cost model.
        allowed: Devices each group may use, shape ``(G, D)``, bool.
        order: The groups' priority order, shape ``(G,)``; ``None`` for the simulator's own
            (:meth:`Schedule.build`). The exact solver passes the order of the whole graph for a part of it.
        prepaid: Device on which each group's subgraph is already started, or -1, shape ``(G,)``
            (:attr:`Schedule.prepaid`): such a group may head its component without paying.
    """
    sched = Schedule.build(cost, order, prepaid)
    allowed = allowed & np.isfinite(cost.compute)
    devs = [np.flatnonzero(allowed[g]).tolist() for g in range(cost.num_groups)]
    times = _Durations(cost, sched, allowed)
    m = times.big_m(devs)
    lp = _Builder()
    x = _assignment(lp, devs, cost.num_devices)
    start = [lp.var(0, m) for _ in range(cost.num_groups)]
    finish = [lp.var(0, m) for _ in range(cost.num_groups)]
    makespan = lp.var(0, m, cost=1.0)
    pay = _invoke_overhead(lp, cost, sched, devs, x)
    links = _LinkQueues(lp, m)
    device_free: list[int | None] = [None] * cost.num_devices
    host = cost.host
    for g in sched.order.tolist():
        if cost.input_bytes[g] > 0:  # graph input: host -> the group's device
            uses = [((host, d), int(x[g, d]), times.copy(host, d, cost.input_bytes[g])) for d in devs[g]]
            arrival = links.transfer(None, [u for u in uses if u[0][0] != u[0][1]])
            lp.row([(start[g], 1.0), (arrival, -1.0)], lower=0.0)
        for j in range(sched.pred_ptr[g], sched.pred_ptr[g + 1]):  # each input edge p -> g
            p, nbytes = int(sched.pred_src[j]), float(sched.pred_bytes[j])
            uses = []
            for a in devs[p]:
                for b in devs[g]:
                    if a != b:  # y = x[p, a] x[g, b], linearised from below
                        y = lp.var(0, 1)
                        lp.row([(y, 1.0), (int(x[p, a]), -1.0), (int(x[g, b]), -1.0)], lower=-1.0)
                        uses.append(((a, b), y, times.copy(a, b, nbytes)))
            arrival = links.transfer(finish[p], uses)
            lp.row([(start[g], 1.0), (arrival, -1.0)], lower=0.0)
        _run_in_order(lp, g, devs[g], x, start[g], finish[g], device_free, m)
        terms = [(finish[g], 1.0), (start[g], -1.0)] + [(int(x[g, d]), -times.compute[g, d]) for d in devs[g]]
        terms += [(col, -times.invoke[d]) for d, col in pay[g].items() if d != sched.prepaid[g]]
        lp.row(terms, lower=0.0)
        lp.row([(makespan, 1.0), (finish[g], -1.0)], lower=0.0)
        if cost.result_bytes[g] > 0:  # graph result: the group's device -> host
            uses = [((d, host), int(x[g, d]), times.copy(d, host, cost.result_bytes[g])) for d in devs[g]]
            arrival = links.transfer(finish[g], [u for u in uses if u[0][0] != u[0][1]])
            lp.row([(makespan, 1.0), (arrival, -1.0)], lower=0.0)
    _memory(lp, cost, sched, devs, x)
    return PlacementMILP(lp, x, m)


class _Durations:
    """Compute and copy durations of one cost model in microseconds, and the big-M they imply."""

    def __init__(self, cost: CostModel, sched: Schedule, allowed: np.ndarray) -> None:
        self.cost, self.sched = cost, sched
        self.compute = np.where(allowed, cost.compute, 0.0) * TIME_SCALE  # (G, D)
        self.invoke = cost.invoke_overhead * TIME_SCALE  # (D,)
        self.latency = cost.link_latency * TIME_SCALE  # (D, D)
        self.inv_bw = sched.inv_bw * TIME_SCALE  # (D, D)

    def copy(self, a: int, b: int, nbytes: float) -> float:
        """Microseconds to move ``nbytes`` over the link ``a -> b``."""
        return float(self.latency[a, b] + nbytes * self.inv_bw[a, b])

    def big_m(self, devs: list[list[int]]) -> float:
        """An upper bound of every event time of every placement: all durations back to back."""
        cost, host, d_count = self.cost, self.cost.host, self.cost.num_devices
        total = sum(max(self.compute[g, d] for d in devs[g]) for g in range(cost.num_groups))
        total += cost.num_groups * float(self.invoke.max())
        for g in range(cost.num_groups):
            if cost.input_bytes[g] > 0:
                total += max(
                    [self.copy(host, d, cost.input_bytes[g]) for d in devs[g] if d != host], default=0.0
                )
            if cost.result_bytes[g] > 0:
                total += max(
                    [self.copy(d, host, cost.result_bytes[g]) for d in devs[g] if d != host], default=0.0
                )
        pairs = [(a, b) for a in range(d_count) for b in range(d_count) if a != b]
        for nbytes in self.sched.pred_bytes.tolist():
            total += max([self.copy(a, b, nbytes) for a, b in pairs], default=0.0)
        return total * 1.01 + 1.0


def _assignment(lp: _Builder, devs: list[list[int]], d_count: int) -> np.ndarray:
    """Binary ``x[g, d]`` with one device per group; the column indices, shape ``(G, D)``, -1 if not allowed."""
    x = np.full((len(devs), d_count), -1, dtype=np.int64)
    for g, allowed in enumerate(devs):
        for d in allowed:
            x[g, d] = lp.var(0, 1, integer=True)
        lp.row([(int(x[g, d]), 1.0) for d in allowed], 1.0, 1.0)
    return x


class _LinkQueues:
    """Each link as a FIFO of transfers in the schedule's fixed sequence: a "link free at" state per link."""

    def __init__(self, lp: _Builder, big_m: float) -> None:
        self.lp, self.m = lp, big_m
        self.state: dict[tuple[int, int], int] = {}

    def transfer(self, ready: int | None, uses: list[tuple[tuple[int, int], int, float]]) -> int:
        """The arrival column of one tensor that becomes available at column ``ready`` (``None``: time 0)
        and crosses link ``link`` with duration ``duration`` when ``indicator`` is 1, for each
        ``(link, indicator, duration)`` of ``uses`` (at most one indicator is 1; none: no copy)."""
        lp, m = self.lp, self.m
        arrival = lp.var(0, m)
        terms = [(arrival, 1.0)] + ([(ready, -1.0)] if ready is not None else [])
        lp.row(terms + [(indicator, -duration) for _, indicator, duration in uses], lower=0.0)
        for link, indicator, duration in uses:
            prev = self.state.get(link)
            new = lp.var(0, m)
            if prev is not None:  # when active: arrival >= the link's previous arrival + duration
                lp.row([(arrival, 1.0), (prev, -1.0), (indicator, -(duration + m))], lower=-m)
                lp.row([(new, 1.0), (prev, -1.0)], lower=0.0)
            lp.row([(new, 1.0), (arrival, -1.0), (indicator, -m)], lower=-m)
            self.state[link] = new
        return arrival


def _run_in_order(
    lp: _Builder,
    g: int,
    devs: list[int],
    x: np.ndarray,
    start: int,
    finish: int,
    device_free: list[int | None],
    m: float,
) -> None:
    """Group ``g`` starts after the "device free at" state of its device and becomes that state."""
    for d in devs:
        prev = device_free[d]
        new = lp.var(0, m)
        if prev is not None:
            lp.row([(start, 1.0), (prev, -1.0), (int(x[g, d]), -m)], lower=-m)
            lp.row([(new, 1.0), (prev, -1.0)], lower=0.0)
        lp.row([(new, 1.0), (finish, -1.0), (int(x[g, d]), -m)], lower=-m)
        device_free[d] = new


def _invoke_overhead(
    lp: _Builder, cost: CostModel, sched: Schedule, devs: list[list[int]], x: np.ndarray
) -> list[dict[int, int]]:
    """``pay[g][d]`` columns forcing the first group of each same-device component to pay the device's
    invoke overhead (see the module docstring); empty dicts when no device has one."""
    g_count = cost.num_groups
    costly = {d for d in range(cost.num_devices) if cost.invoke_overhead[d] > 0}
    pay: list[dict[int, int]] = [{} for _ in range(g_count)]
    if not costly:
        return pay
    neighbours: list[set[int]] = [set() for _ in range(g_count)]
    for a, b in zip(cost.edge_src.tolist(), cost.edge_dst.tolist()):
        neighbours[a].add(b)
        neighbours[b].add(a)
    big = float(g_count)
    u = [lp.var(0, big) for _ in range(g_count)]  # pointer-forest potentials
    r = [lp.var(0, big) for _ in range(g_count)]  # position of the payer a pointer chain ends at
    for g in range(g_count):
        on = [d for d in devs[g] if d in costly]
        if not on:
            continue
        for d in on:
            pay[g][d] = lp.var(0, 1, integer=True)
            lp.row([(pay[g][d], 1.0), (int(x[g, d]), -1.0)], upper=0.0)
        pos = float(sched.pos[g])
        paid = [(pay[g][d], 1.0) for d in on]
        # a payer's label is its own position
        lp.row([(r[g], 1.0)] + [(c, -big) for c, _ in paid], lower=pos - big)
        lp.row([(r[g], 1.0)] + [(c, big) for c, _ in paid], upper=pos + big)
        # a non-payer (on a costly device, not paying) reaches an earlier payer
        nonpay = [(int(x[g, d]), 1.0) for d in on] + [(c, -1.0) for c, _ in paid]
        lp.row([(r[g], 1.0)] + [(c, big * v) for c, v in nonpay], upper=pos - 1.0 + big)
        pointers = []
        for h in sorted(neighbours[g]):
            shared = [d for d in on if d in devs[h]]
            if not shared:
                continue
            z = lp.var(0, 1, integer=True)
            pointers.append((z, 1.0))
            for d in on:  # g on d => h on d
                terms = [(z, 1.0), (int(x[g, d]), 1.0)]
                if d in devs[h]:
                    terms.append((int(x[h, d]), -1.0))
                lp.row(terms, upper=1.0)
            lp.row([(u[g], 1.0), (u[h], -1.0), (z, -(big + 1.0))], lower=-big)
            lp.row([(r[g], 1.0), (r[h], -1.0), (z, big)], upper=big)
            lp.row([(r[h], 1.0), (r[g], -1.0), (z, big)], upper=big)
        lp.row(pointers + [(c, -v) for c, v in nonpay], lower=0.0)
    # a cut (valid for binary x, it tightens the relaxation): the first group of every component pays, so
    # a group on a costly device has a payer there at or before its position
    for d in costly:
        payers: list[tuple[int, float]] = []
        for g in sched.order.tolist():
            if d in pay[g]:
                payers.append((pay[g][d], 1.0))
                lp.row(payers + [(int(x[g, d]), -1.0)], lower=0.0)
    return pay


def _memory(lp: _Builder, cost: CostModel, sched: Schedule, devs: list[list[int]], x: np.ndarray) -> None:
    """Per-position memory rows for every device the placement could overfill (see the module docstring)."""
    g_count = cost.num_groups
    pos, last_use = sched.pos, sched.last_use
    for d in range(cost.num_devices):
        groups = [g for g in range(g_count) if d in devs[g]]
        edges = [
            (int(s), int(t), float(b))
            for s, t, b in zip(cost.edge_src, cost.edge_dst, cost.edge_bytes)
            if d in devs[t] and b > 0
        ]
        worst = sum(cost.param_bytes[g] + cost.out_bytes[g] + cost.input_bytes[g] for g in groups)
        if worst + sum(b for _, _, b in edges) <= cost.capacity[d]:
            continue
        copies = []
        for s, t, b in edges:
            w = lp.var(0, 1)
            terms = [(w, 1.0), (int(x[t, d]), -1.0)]
            if d in devs[s]:
                terms.append((int(x[s, d]), 1.0))
            lp.row(terms, lower=0.0)
            copies.append((w, s, t, b))
        for k in range(g_count):
            terms = []
            for g in groups:
                nbytes = cost.param_bytes[g]
                if pos[g] <= k < last_use[g]:
                    nbytes += cost.out_bytes[g]
                if k <= pos[g]:
                    nbytes += cost.input_bytes[g]
                if nbytes > 0:
                    terms.append((int(x[g, d]), nbytes * MEMORY_SCALE))
            terms += [(w, b * MEMORY_SCALE) for w, s, t, b in copies if pos[s] + 1 <= k <= pos[t]]
            lp.row(terms, upper=cost.capacity[d] * MEMORY_SCALE)


class MILPPlacement(PlacementMethod):
    """Exact MILP of the simulated cost model, solved by HiGHS (see the module docstring).

    Evaluations: the single-device placements and HEFT's (warm-start candidates), then the solver's
    incumbent.

    Args:
        time_limit: HiGHS's time limit in seconds.
        mip_rel_gap: Relative gap at which HiGHS stops.
        warm_start: Give HiGHS the best warm-start candidate.
        threads: HiGHS threads (``None``: its default).
    """

    name = "milp"
    track = "white-box"  # reads the cost model

    def __init__(
        self,
        time_limit: float = 60.0,
        mip_rel_gap: float = 1e-6,
        warm_start: bool = True,
        threads: int | None = None,
    ) -> None:
        if time_limit <= 0:
            raise PlacementGymError(f"time_limit must be > 0 seconds, got {time_limit}")
        self.time_limit = time_limit
        self.mip_rel_gap = mip_rel_gap
        self.warm_start = warm_start
        self.threads = threads

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        cost = tracker.problem.cost_model()
        allowed = allowed_devices(tracker.problem)
        g_count = cost.num_groups
        candidates = [heft_placement(cost, allowed)[0]]
        candidates += [
            np.full(g_count, d, dtype=np.int64) for d in range(cost.num_devices) if allowed[:, d].all()
        ]
        warm, warm_latency = None, np.inf
        for placement in candidates:
            latency = evaluate_within_budget(tracker, placement)
            if latency is not None and latency < warm_latency:
                warm, warm_latency = placement, latency

        built = time.perf_counter()
        model = build_milp(cost, allowed)
        h = model.builder.highs()
        build_time = time.perf_counter() - built
        h.setOptionValue("time_limit", float(self.time_limit))
        h.setOptionValue("mip_rel_gap", float(self.mip_rel_gap))
        h.setOptionValue("random_seed", int(seed))
        if self.threads is not None:
            h.setOptionValue("threads", int(self.threads))
        if self.warm_start and warm is not None:
            cols = model.x[np.arange(g_count), warm]
            zeros = model.x[model.x >= 0]
            values = np.isin(zeros, cols).astype(np.float64)
            h.setSolution(len(zeros), zeros.astype(np.int32), values)
        solve_start = time.perf_counter()
        h.run()
        solve_time = time.perf_counter() - solve_start
        info = h.getInfo()
        status = h.modelStatusToString(h.getModelStatus())
        extra: dict[str, Any] = {
            "status": status,
            "gap": float(info.mip_gap),
            "objective": float(info.objective_function_value) / TIME_SCALE,
            "dual_bound": float(info.mip_dual_bound) / TIME_SCALE,
            "solve_time": solve_time,
            "build_time": build_time,
            "num_vars": model.num_vars,
            "num_rows": model.num_rows,
            "warm_start_latency": warm_latency,
            "solver_placement_latency": None,
        }
        if info.primal_solution_status == 2:  # feasible incumbent
            values = np.asarray(h.getSolution().col_value)
            score = np.where(model.x >= 0, values[np.maximum(model.x, 0)], -1.0)  # (G, D)
            placement = np.argmax(score, axis=1).astype(np.int64)
            extra["solver_placement_latency"] = evaluate_within_budget(tracker, placement)
        else:
            extra["objective"] = float("nan")
        return extra
