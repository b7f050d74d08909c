"""An event-driven list schedule of a placement on a :class:`~placement_gym.simulation.cost_model.CostModel`,
compiled with numba.

Rules (Placeto's simulator, made deterministic by a fixed priority order):

* Groups are taken in one fixed priority order: decreasing upward rank (HEFT's rank with device-averaged
  compute and transfer costs), ties by index, which is a topological order. It does not depend on the
  placement, so the schedule is a pure function of (cost model, placement).
* Each device runs one group at a time, in that order (no insertion into idle gaps). A group starts when
  its device is free and all its inputs have arrived.
* An edge between groups on different devices is a transfer on the link ``src -> dst``: it can start when
  the producer finishes and the link is free, and takes ``latency + bytes / bandwidth``. Each link carries
  one transfer at a time (a FIFO in schedule order); transfers overlap with computation.
* Graph inputs start on the host (a group on another device first receives its ``input_bytes``) and
  results go back to the host (``result_bytes`` after the group finishes). The latency is the time the last
  result reaches the host (or the last group finishes).
* Devices that share hardware (two virtual CPUs) slow each other down: a group that starts while
  another such device is busy runs ``contention x overlap`` longer (the earlier group keeps its time,
  so the lost work is charged to the later one).
* A device pays ``invoke_overhead`` once per subgraph: per connected component of the groups it runs
  (groups joined by edges placed on the same device), charged to the component's first group.
* Memory, per device: its groups' weights, plus each activation from the start of its producer up to the
  last consumer in schedule order (kept to the end if it is a graph output), plus each received copy from
  the position after its producer up to its consumer, plus each graph input up to its consumer. The peak
  over schedule positions must fit the device's capacity, otherwise the placement is infeasible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from placement_gym.errors import BackendError
from placement_gym.simulation.cost_model import CostModel


@numba.njit(cache=True)
def _find(parent: np.ndarray, g: int) -> int:
    while parent[g] != g:
        parent[g] = parent[parent[g]]
        g = parent[g]
    return g


@numba.njit(cache=True)
def _memory_overflow(
    dev: np.ndarray,  # (G,) int64: device of each group
    pos: np.ndarray,  # (G,) int64: position of each group in the schedule order
    pred_ptr: np.ndarray,  # (G+1,) int64
    pred_src: np.ndarray,  # (E,) int64
    pred_bytes: np.ndarray,  # (E,) float64
    last_use: np.ndarray,  # (G,) int64
    input_bytes: np.ndarray,  # (G,) float64
    param_bytes: np.ndarray,  # (G,) float64
    out_bytes: np.ndarray,  # (G,) float64
    capacity: np.ndarray,  # (D,) float64
) -> tuple[int, float]:
    """(first device whose peak memory exceeds its capacity or -1, that peak in bytes) of placement ``dev``
    (the memory rule of the module docstring)."""
    n_groups = dev.shape[0]
    n_dev = capacity.shape[0]
    # difference arrays over schedule positions, per device
    live = np.zeros((n_dev, n_groups + 1))
    weights = np.zeros(n_dev)
    for g in range(n_groups):
        d = dev[g]
        weights[d] += param_bytes[g]
        live[d, pos[g]] += out_bytes[g]
        live[d, last_use[g]] -= out_bytes[g]
        if input_bytes[g] > 0:
            live[d, 0] += input_bytes[g]
            live[d, pos[g] + 1] -= input_bytes[g]
    for t in range(n_groups):
        d = dev[t]
        for j in range(pred_ptr[t], pred_ptr[t + 1]):
            s = pred_src[j]
            # a received copy if the source is on another device, else 0.0: branch-free, as random
            # placements make the branch unpredictable (bytes are finite, CostModel checks it)
            copy = pred_bytes[j] * (dev[s] != d)
            live[d, pos[s] + 1] += copy
            live[d, pos[t] + 1] -= copy
    for d in range(n_dev):
        run = weights[d]
        peak = run
        for k in range(n_groups + 1):
            run += live[d, k]
            if run > peak:
                peak = run
        if peak > capacity[d]:
            return d, peak
    return -1, 0.0


@numba.njit(cache=True)
def _simulate(
    dev: np.ndarray,  # (G,) int64: device of each group
    order: np.ndarray,  # (G,) int64: groups in priority order
    pos: np.ndarray,  # (G,) int64: position of each group in ``order``
    pred_ptr: np.ndarray,  # (G+1,) int64: CSR offsets of each group's incoming edges
    pred_src: np.ndarray,  # (E,) int64: source group of each incoming edge, grouped by destination
    pred_bytes: np.ndarray,  # (E,) float64
    last_use: np.ndarray,  # (G,) int64: position after which a group's output is freed
    compute: np.ndarray,  # (G, D) float64
    latency: np.ndarray,  # (D, D) float64
    inv_bw: np.ndarray,  # (D, D) float64, 0 on the diagonal
    invoke: np.ndarray,  # (D,) float64
    host: int,
    input_bytes: np.ndarray,  # (G,) float64
    result_bytes: np.ndarray,  # (G,) float64
    param_bytes: np.ndarray,  # (G,) float64
    out_bytes: np.ndarray,  # (G,) float64
    capacity: np.ndarray,  # (D,) float64
    contention: np.ndarray,  # (D, D) float64
    prepaid: np.ndarray,  # (G,) int64: device on which the group's subgraph is already started, or -1
    check_memory: bool,  # False if no placement can exceed any capacity (Schedule.build's bound)
    has_contention: bool,  # False if contention is all zero
    has_invoke: bool,  # False if every invoke overhead is zero
) -> tuple[float, int, float]:
    """(latency, first device over capacity or -1, its peak bytes) of one placement ``dev``."""
    n_groups = dev.shape[0]
    n_dev = capacity.shape[0]
    if check_memory:
        over, peak = _memory_overflow(
            dev, pos, pred_ptr, pred_src, pred_bytes, last_use, input_bytes, param_bytes, out_bytes, capacity
        )
        if over >= 0:
            return np.inf, over, peak
    # ---- subgraphs: connected components of same-device edges (only their invoke overheads need them)
    parent = np.arange(n_groups)
    started = np.zeros(n_groups, dtype=np.bool_)
    if has_invoke:
        for t in range(n_groups):
            for j in range(pred_ptr[t], pred_ptr[t + 1]):
                s = pred_src[j]
                if dev[s] == dev[t]:
                    a, b = _find(parent, s), _find(parent, t)
                    if a != b:
                        parent[b] = a
        for g in range(n_groups):
            if prepaid[g] == dev[g]:
                started[_find(parent, g)] = True
    # ---- list schedule
    finish = np.zeros(n_groups)
    dev_free = np.zeros(n_dev)
    link_free = np.zeros((n_dev, n_dev))
    makespan = 0.0
    for k in range(n_groups):
        g = order[k]
        d = dev[g]
        ready = 0.0
        if input_bytes[g] > 0 and d != host:
            end = link_free[host, d] + latency[host, d] + input_bytes[g] * inv_bw[host, d]
            link_free[host, d] = end
            ready = end
        for j in range(pred_ptr[g], pred_ptr[g + 1]):
            p = pred_src[j]
            dp = dev[p]
            if dp == d:
                arrive = finish[p]
            else:
                start = max(finish[p], link_free[dp, d])
                arrive = start + latency[dp, d] + pred_bytes[j] * inv_bw[dp, d]
                link_free[dp, d] = arrive
            if arrive > ready:
                ready = arrive
        start = max(ready, dev_free[d])
        cost = compute[g, d]
        if has_invoke:  # (without, the overhead added would be 0.0, which leaves cost as it is)
            root = _find(parent, g)
            if not started[root]:
                started[root] = True
                cost += invoke[d]
        if has_contention:
            extra = 0.0
            for o in range(n_dev):
                if o != d and contention[d, o] > 0.0 and dev_free[o] > start:
                    extra += contention[d, o] * min(cost, dev_free[o] - start)
            cost += extra
        end = start + cost
        finish[g] = end
        dev_free[d] = end
        if end > makespan or end != end:  # NaN propagates so the caller can report it
            makespan = end
        if result_bytes[g] > 0 and d != host:
            arrive = max(end, link_free[d, host]) + latency[d, host] + result_bytes[g] * inv_bw[d, host]
            link_free[d, host] = arrive
            if arrive > makespan:
                makespan = arrive
    return makespan, -1, 0.0


@numba.njit(cache=True)
def _simulate_packed(
    dev: np.ndarray,  # (G,) int64
    per_group_int: np.ndarray,  # (4, G) int64: order, pos, last_use, prepaid
    pred_ptr: np.ndarray,
    pred_src: np.ndarray,
    pred_bytes: np.ndarray,
    compute: np.ndarray,
    per_group_bytes: np.ndarray,  # (4, G) float64: input, result, param, out bytes
    per_link: np.ndarray,  # (3, D, D) float64: latency, inv_bw, contention
    per_device: np.ndarray,  # (2, D) float64: invoke overhead, capacity
    host: int,
    check_memory: bool,
    has_contention: bool,
    has_invoke: bool,
) -> tuple[float, int, float]:
    """:func:`_simulate` with its arrays packed into a few (a compiled call pays per argument it unpacks)."""
    return _simulate(
        dev, per_group_int[0], per_group_int[1], pred_ptr, pred_src, pred_bytes, per_group_int[2], compute,
        per_link[0], per_link[1], per_device[0], host, per_group_bytes[0], per_group_bytes[1],
        per_group_bytes[2], per_group_bytes[3], per_device[1], per_link[2], per_group_int[3], check_memory,
        has_contention, has_invoke,
    )  # fmt: skip


@numba.njit(cache=True)
def _simulate_batch(
    placements: np.ndarray,  # (B, G) int64
    order: np.ndarray,
    pos: np.ndarray,
    pred_ptr: np.ndarray,
    pred_src: np.ndarray,
    pred_bytes: np.ndarray,
    last_use: np.ndarray,
    compute: np.ndarray,
    latency: np.ndarray,
    inv_bw: np.ndarray,
    invoke: np.ndarray,
    host: int,
    input_bytes: np.ndarray,
    result_bytes: np.ndarray,
    param_bytes: np.ndarray,
    out_bytes: np.ndarray,
    capacity: np.ndarray,
    contention: np.ndarray,
    prepaid: np.ndarray,
    check_memory: bool,
    has_contention: bool,
    has_invoke: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_simulate` over the rows of ``placements``: latencies, overflowing devices, peaks, each ``(B,)``."""
    n = placements.shape[0]
    lat = np.empty(n)
    over = np.empty(n, dtype=np.int64)
    peak = np.empty(n)
    for i in range(n):
        lat[i], over[i], peak[i] = _simulate(
            placements[i], order, pos, pred_ptr, pred_src, pred_bytes, last_use, compute, latency, inv_bw,
            invoke, host, input_bytes, result_bytes, param_bytes, out_bytes, capacity, contention, prepaid,
            check_memory, has_contention, has_invoke,
        )  # fmt: skip
    return lat, over, peak


def upward_rank(cost: CostModel) -> np.ndarray:
    """HEFT's upward rank with device-averaged costs, shape ``(G,)``.

    ``rank[g] = mean_d compute[g, d] + max over successors s of (mean transfer time of the edge + rank[s])``,
    the mean transfer taken over all ordered device pairs (0 on the same device). Non-finite compute entries
    (a device that cannot run a group) are left out of the mean.
    """
    g_count, d = cost.num_groups, cost.num_devices
    finite = np.where(np.isfinite(cost.compute), cost.compute, 0.0)
    counts = np.maximum(np.isfinite(cost.compute).sum(axis=1), 1)
    mean = finite.sum(axis=1) / counts
    inv_bw = cost.inverse_bandwidth()
    comm = cost.link_latency.sum() / d**2 + cost.edge_bytes * (inv_bw.sum() / d**2)
    starts = np.searchsorted(cost.edge_src, np.arange(g_count + 1))  # edges are sorted by source
    rank = mean.copy()
    for g in range(g_count - 1, -1, -1):
        lo, hi = starts[g], starts[g + 1]
        if hi > lo:
            rank[g] += float(np.max(comm[lo:hi] + rank[cost.edge_dst[lo:hi]]))
    return rank


def _grouped_edges(
    key: np.ndarray, other: np.ndarray, nbytes: np.ndarray, num_groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges grouped by their ``key`` end (CSR): ``(ptr, other end, bytes)``, stable within a group."""
    order = np.argsort(key, kind="stable")
    ptr = np.searchsorted(key[order], np.arange(num_groups + 1)).astype(np.int64)
    return (
        ptr,
        np.ascontiguousarray(other[order], dtype=np.int64),
        np.ascontiguousarray(nbytes[order], dtype=np.float64),
    )


def incoming_edges(cost: CostModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The edges of ``cost`` grouped by destination (CSR): ``(ptr, src, nbytes)``, where group ``g``'s
    incoming edges are ``ptr[g]:ptr[g + 1]`` of ``src`` (int64) and ``nbytes`` (float64)."""
    return _grouped_edges(cost.edge_dst, cost.edge_src, cost.edge_bytes, cost.num_groups)


def outgoing_edges(cost: CostModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The edges of ``cost`` grouped by source (CSR): ``(ptr, dst, nbytes)``, as :func:`incoming_edges`."""
    return _grouped_edges(cost.edge_src, cost.edge_dst, cost.edge_bytes, cost.num_groups)


@dataclass(frozen=True, eq=False)
class Schedule:
    """The placement-independent arrays of the list schedule of one cost model.

    Attributes:
        cost: The cost model.
        order: Groups in priority order, shape ``(G,)`` (a topological order).
        pos: Position of each group in ``order``, shape ``(G,)``.
        pred_ptr: CSR offsets of each group's incoming edges, shape ``(G+1,)``.
        pred_src: Source group of each incoming edge, shape ``(E,)``.
        pred_bytes: Bytes of each incoming edge, shape ``(E,)``.
        last_use: Schedule position after which each group's output is freed, shape ``(G,)``.
        inv_bw: ``1 / bandwidth`` per link, shape ``(D, D)``, 0 on the diagonal.
        prepaid: For each group, a device on which its subgraph counts as already started (no invoke
            overhead: a part of a larger graph whose subgraph began before it), or -1; shape ``(G,)``.
    """

    cost: CostModel
    order: np.ndarray
    pos: np.ndarray
    pred_ptr: np.ndarray
    pred_src: np.ndarray
    pred_bytes: np.ndarray
    last_use: np.ndarray
    inv_bw: np.ndarray
    prepaid: np.ndarray

    @classmethod
    def build(
        cls, cost: CostModel, order: np.ndarray | None = None, prepaid: np.ndarray | None = None
    ) -> Schedule:
        """The schedule of ``cost`` in its priority order, or in ``order`` if given.

        Args:
            cost: The cost model.
            order: A topological order of the groups to use instead of the priority order, shape ``(G,)``
                (the exact solver schedules a part of a graph in the order the whole graph gives it).
            prepaid: See :attr:`prepaid` (``None``: no group; a whole graph has none).

        Raises:
            BackendError: If ``order`` is not a topological order of ``cost``'s groups.
        """
        g = cost.num_groups
        if order is None:
            rank = upward_rank(cost)
            order = np.lexsort((np.arange(g), -rank)).astype(np.int64)
            pos = np.empty(g, dtype=np.int64)
            pos[order] = np.arange(g)
            if np.any(pos[cost.edge_src] >= pos[cost.edge_dst]):  # ties of zero-cost groups: index order
                order = np.arange(g, dtype=np.int64)
                pos = order.copy()
        else:
            order = np.asarray(order, dtype=np.int64)
            if sorted(order.tolist()) != list(range(g)):
                raise BackendError(f"order must be a permutation of the {g} groups")
            pos = np.empty(g, dtype=np.int64)
            pos[order] = np.arange(g)
            if np.any(pos[cost.edge_src] >= pos[cost.edge_dst]):
                raise BackendError("order is not a topological order of the groups")
        if prepaid is not None and np.shape(prepaid) != (g,):
            raise BackendError(f"prepaid must have shape ({g},), got {np.shape(prepaid)}")
        pred_ptr, pred_src, pred_bytes = incoming_edges(cost)
        last_use = pos + 1
        np.maximum.at(last_use, cost.edge_src, pos[cost.edge_dst] + 1)
        last_use[cost.result_bytes > 0] = g  # graph outputs stay until the end
        inv_bw = cost.inverse_bandwidth()
        np.fill_diagonal(inv_bw, 0.0)
        return cls(
            cost=cost,
            order=order,
            pos=pos,
            pred_ptr=pred_ptr,
            pred_src=pred_src,
            pred_bytes=pred_bytes,
            last_use=last_use.astype(np.int64),
            inv_bw=inv_bw,
            prepaid=np.full(g, -1, dtype=np.int64) if prepaid is None else np.asarray(prepaid, np.int64),
        )

    @property
    def memory_can_overflow(self) -> bool:
        """False if no placement can exceed any device's capacity: every device could hold all weights,
        activations, graph inputs and received copies at once (with a margin for rounding). The simulator
        then skips the memory check, whose answer is known."""
        c = self.cost
        bound = float(c.param_bytes.sum() + c.out_bytes.sum() + c.input_bytes.sum() + self.pred_bytes.sum())
        return bool(np.any(np.asarray(c.capacity, dtype=np.float64) < bound * (1 + 1e-6)))

    def _args(self) -> tuple:
        c = self.cost
        contention = np.ascontiguousarray(c.contention, dtype=np.float64)
        return (
            self.order, self.pos, self.pred_ptr, self.pred_src, self.pred_bytes, self.last_use,
            np.ascontiguousarray(c.compute, dtype=np.float64), c.link_latency, self.inv_bw,
            c.invoke_overhead, int(c.host), c.input_bytes, c.result_bytes, c.param_bytes, c.out_bytes,
            c.capacity, contention, self.prepaid, self.memory_can_overflow, bool((contention > 0).any()),
            bool((np.asarray(c.invoke_overhead) != 0).any()),
        )  # fmt: skip

    def _packed_args(self) -> tuple:
        """:meth:`_args` packed for :func:`_simulate_packed`."""
        (
            order, pos, pred_ptr, pred_src, pred_bytes, last_use, compute, latency, inv_bw, invoke, host,
            input_bytes, result_bytes, param_bytes, out_bytes, capacity, contention, prepaid, check_memory,
            has_contention, has_invoke,
        ) = self._args()  # fmt: skip
        return (
            np.ascontiguousarray(np.stack([order, pos, last_use, prepaid]), dtype=np.int64),
            pred_ptr, pred_src, pred_bytes, compute,
            np.ascontiguousarray(np.stack([input_bytes, result_bytes, param_bytes, out_bytes]), dtype=np.float64),
            np.ascontiguousarray(np.stack([latency, inv_bw, contention]), dtype=np.float64),
            np.ascontiguousarray(np.stack([invoke, capacity]), dtype=np.float64),
            host, check_memory, has_contention, has_invoke,
        )  # fmt: skip

    def __post_init__(self) -> None:
        object.__setattr__(self, "_packed", self._args())
        object.__setattr__(self, "_packed_one", self._packed_args())

    def run(self, placement: np.ndarray) -> tuple[float, int, float]:
        """``(latency, device over capacity or -1, its peak bytes)`` of a valid int64 placement ``(G,)``."""
        return _simulate_packed(placement, *self._packed_one)

    def run_batch(self, placements: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`run` over a valid int64 batch ``(B, G)``; three arrays of shape ``(B,)``."""
        return _simulate_batch(np.ascontiguousarray(placements, dtype=np.int64), *self._packed)
