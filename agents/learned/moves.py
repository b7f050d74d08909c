"""The features a learned scorer ranks placement-improvement moves by.

The moves themselves (:class:`Moves`, :func:`propose`, :func:`twin_classes`, :func:`fork_branches`,
:func:`branch_sets` and the kinds) live in :mod:`placement_gym.moves`, where the env uses them too, and are
re-exported here.

Every move is described by :data:`MOVE_FEATURES`, computed from the cost model and the current placement
only (no evaluation): the change of compute and transfer time it causes (also weighted by how critical
the groups are on the current placement's longest path), launch overheads, device loads, its size and
kind, and the change of a queue-free latency estimate of the whole placement
(:meth:`MoveFeaturizer.estimate`). All are relative to the current latency, so one scorer serves graphs and platforms of any size.
"""

from __future__ import annotations

import numba
import numpy as np

from placement_gym.moves import (
    KINDS,
    SEGMENT_LENGTHS,
    WINDOW_LENGTHS,
    Moves,
    branch_sets,
    fork_branches,
    propose,
    twin_classes,
)
from placement_gym.simulation.cost_model import CostModel
from placement_gym.simulation.schedule import incoming_edges

MOVE_FEATURES = (
    "d_compute",  # sum over moved groups of (time on d - time where it is) / latency
    "d_compute_critical",  # the same, each group weighted by its criticality
    "d_transfer",  # change of the transfer time of every edge touching the moved groups / latency
    "d_transfer_critical",  # the same, each edge weighted by the criticality of its endpoints
    "invoke_new",  # d's invoke overhead / latency if no outside neighbour of the set is on d
    "invoke_old",  # invoke overhead of the devices the set leaves / latency
    "load_target",  # compute already on d / latency
    "load_target_after",  # compute on d after the move / latency
    "load_source",  # compute on the devices the set leaves / latency
    "criticality",  # largest criticality of a moved group
    "size",  # log2(1 + moved groups) / log2(1 + G)
    "kind_single",
    "kind_class",
    "kind_segment",
    "kind_window",
    "kind_branch",
    "neighbours_on_target",  # fraction of the set's outside neighbours already on d
    "speed_ratio",  # log(time of the set on d / time where it is), clipped to [-3, 3]
    "d_estimate",  # change of the queue-free latency estimate (MoveFeaturizer.estimate) / latency
)


@numba.njit(cache=True)
def _estimate(
    placements: np.ndarray,  # (B, G) int8 (int64 with 128 devices or more)
    base: np.ndarray,  # (G,) same dtype: a placement the rows share a prefix with (any placement is correct)
    pred_ptr: np.ndarray,  # (G+1,) int64: CSR offsets of each group's incoming edges
    pred_src: np.ndarray,  # (E,) int64
    pred_bytes: np.ndarray,  # (E,) float64
    compute: np.ndarray,  # (G, D) float64
    latency: np.ndarray,  # (D, D) float64
    inv_bw: np.ndarray,  # (D, D) float64, 0 on the diagonal
    invoke: np.ndarray,  # (D,) float64
    host: int,
    input_bytes: np.ndarray,  # (G,) float64
    result_bytes: np.ndarray,  # (G,) float64
) -> np.ndarray:
    """See :meth:`MoveFeaturizer.estimate`; groups in index order are topological.

    The state before a row's first group that differs from ``base`` (finish times, device loads and the
    longest end so far, accumulated in the same order) is taken from one pass over ``base``, so a move
    is charged for the groups from its first moved one on; the result is the same to the bit.
    """
    b_count, g_count = placements.shape
    d_count = compute.shape[1]
    out = np.zeros(b_count)
    finish = np.zeros(g_count)
    load = np.zeros(d_count)
    base_finish = np.zeros(g_count)
    load_before = np.zeros((g_count + 1, d_count))  # device loads accumulated over groups < g
    path_before = np.zeros(g_count + 1)  # the longest end over groups < g
    for b in range(-1, b_count):
        if b < 0:  # the pass over base
            row, first = base, 0
        else:
            row = placements[b]
            first = 0
            while first < g_count and row[first] == base[first]:
                first += 1
            finish[:first] = base_finish[:first]
        load[:] = load_before[first]
        path = path_before[first]
        for g in range(first, g_count):
            d = row[g]
            ready = 0.0
            if input_bytes[g] > 0 and d != host:
                ready = latency[host, d] + input_bytes[g] * inv_bw[host, d]
            same = False
            for j in range(pred_ptr[g], pred_ptr[g + 1]):
                s = pred_src[j]
                ds = row[s]
                if ds == d:
                    same = True
                    arrive = finish[s]
                else:
                    arrive = finish[s] + latency[ds, d] + pred_bytes[j] * inv_bw[ds, d]
                if arrive > ready:
                    ready = arrive
            work = compute[g, d] + (0.0 if same else invoke[d])
            load[d] += work
            finish[g] = ready + work
            end = finish[g]
            if result_bytes[g] > 0 and d != host:
                end += latency[d, host] + result_bytes[g] * inv_bw[d, host]
            if end > path:
                path = end
            if b < 0:
                base_finish[g] = finish[g]
                load_before[g + 1] = load
                path_before[g + 1] = path
        if b >= 0:
            out[b] = max(path, load.max())
    return out


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of a 1-D integer array by sort and compare (several times faster than numpy 2's
    hash-based ``np.unique`` on the ~10^5 keys a ranking pass makes)."""
    values = np.sort(values, kind="stable")  # the keys come in runs sorted by move: timsort / radix is faster
    return values[np.concatenate([[True], values[1:] != values[:-1]])] if len(values) else values


class MoveFeaturizer:
    """Computes :data:`MOVE_FEATURES` of moves on one cost model (placement-independent parts cached)."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self.compute = np.where(np.isfinite(cost.compute), cost.compute, 1e3)  # (G, D), inf -> 1000 s
        inv_bw = cost.inverse_bandwidth().copy()
        np.fill_diagonal(inv_bw, 0.0)
        self.inv_bw = inv_bw  # (D, D)
        self.link_latency = np.asarray(cost.link_latency, dtype=np.float64)  # (D, D), 0 on the diagonal
        self.src, self.dst = cost.edge_src, cost.edge_dst  # (E,)
        self.bytes = np.asarray(cost.edge_bytes, dtype=np.float64)  # (E,)
        self.pred_ptr, self.pred_src, self.pred_bytes = incoming_edges(cost)  # edges by destination (CSR)
        ends = np.concatenate([self.src, self.dst])  # each edge under both of its groups
        order = np.argsort(ends, kind="stable")
        self.inc_edge = np.concatenate([np.arange(len(self.src))] * 2)[order].astype(np.int64)  # (2E,)
        self.inc_ptr = np.concatenate(
            [[0], np.cumsum(np.bincount(ends, minlength=cost.num_groups))]
        )  # (G+1,)

    def transfer(self, nbytes: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Time to send ``nbytes`` from devices ``src`` to ``dst`` (elementwise; 0 on one device)."""
        return self.link_latency[src, dst] + nbytes * self.inv_bw[src, dst]

    def criticality(self, placement: np.ndarray) -> np.ndarray:
        """``((top level + bottom level) / longest path) ** 4`` of each group under ``placement``, shape
        ``(G,)``: 1 on the longest path of compute and transfer times, near 0 far off it."""
        cost, g_count = self.cost, self.cost.num_groups
        work = self.compute[np.arange(g_count), placement]
        edge_time = self.transfer(self.bytes, placement[self.src], placement[self.dst])
        top = self.transfer(cost.input_bytes, np.full(g_count, cost.host), placement)
        bottom = work + self.transfer(cost.result_bytes, placement, np.full(g_count, cost.host))
        order = np.argsort(self.dst, kind="stable")
        for e in order:  # edges by destination: tops of sources are final (edge_src < edge_dst)
            s, t = self.src[e], self.dst[e]
            top[t] = max(top[t], top[s] + work[s] + edge_time[e])
        for e in np.argsort(-self.src, kind="stable"):
            s, t = self.src[e], self.dst[e]
            bottom[s] = max(bottom[s], work[s] + edge_time[e] + bottom[t])
        total = top + bottom
        return (total / max(float(total.max()), 1e-30)) ** 4

    def estimate(self, placements: np.ndarray, base: np.ndarray | None = None) -> np.ndarray:
        """A queue-free latency estimate of each placement, shape ``(B,)`` from ``(B, G)``.

        The larger of the longest path (compute, transfers, graph input and result copies, and a device's
        invoke overhead on every group none of whose inputs comes from that device) and the heaviest
        device's total work. Unlike the simulator it ignores that a device runs one group at a time and a
        link one transfer at a time, which is what a move's features can afford for thousands of moves at
        once; without invoke overheads it is a lower bound of the simulated latency (with them it may
        charge a subgraph more than once, where two same-device chains join).

        ``base`` (shape ``(G,)``, default the first row) only makes it faster: each row is computed from its
        first group that differs from ``base`` on, the state before it taken from ``base``.
        """
        cost = self.cost
        # device indices as int8 where they fit: the (moves x groups) rows are 8x smaller to build
        dtype = np.int8 if cost.num_devices < 128 else np.int64
        placements = np.ascontiguousarray(placements, dtype=dtype)
        if len(placements) == 0:
            return np.zeros(0)
        base = placements[0] if base is None else np.ascontiguousarray(base, dtype=dtype)
        if base.shape != placements.shape[1:]:
            raise ValueError(f"base has shape {base.shape}, the placements {placements.shape[1:]}")
        return _estimate(
            placements, base, self.pred_ptr, self.pred_src, self.pred_bytes,
            self.compute, self.link_latency, self.inv_bw, np.asarray(cost.invoke_overhead, dtype=np.float64),
            int(cost.host), np.asarray(cost.input_bytes, dtype=np.float64),
            np.asarray(cost.result_bytes, dtype=np.float64),
        )  # fmt: skip

    def _touched(self, mi: np.ndarray, gi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The (move, edge) pairs with an endpoint among the moved groups, from the (move, group) pairs,
        in row-major order (as ``np.nonzero`` of the dense (move x edge) mask gives them, without making it)."""
        e_count = len(self.src)
        counts = self.inc_ptr[gi + 1] - self.inc_ptr[gi]
        offsets = np.repeat(self.inc_ptr[gi] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        edges = self.inc_edge[offsets + np.arange(int(counts.sum()))]
        keys = sorted_unique(np.repeat(mi, counts) * e_count + edges)
        return keys // e_count, keys % e_count

    def _rows(self, moves: Moves, placement: np.ndarray) -> np.ndarray:
        """The placement after each move, shape ``(M, G)``, in the dtype :meth:`estimate` runs on."""
        return moves.apply_all(placement, np.int8 if self.cost.num_devices < 128 else np.int64)

    def features(self, placement: np.ndarray, latency: float, moves: Moves) -> np.ndarray:
        """:data:`MOVE_FEATURES` of each move, shape ``(M, F)``, float32.

        Works on the (move, group) and (move, edge) pairs a move touches only, so its cost grows with the
        moves' sizes, not with ``M x E``.
        """
        cost, g_count, d_count = self.cost, self.cost.num_groups, self.cost.num_devices
        m_count = len(moves)
        if m_count == 0:
            return np.zeros((0, len(MOVE_FEATURES)), dtype=np.float32)
        scale = 1.0 / max(latency, 1e-30)
        crit = self.criticality(placement)  # (G,)
        members, target = moves.members, moves.target
        here = self.compute[np.arange(g_count), placement]  # (G,)
        mi, gi = np.divmod(np.flatnonzero(members), g_count)  # (P,) moved (move, group) pairs, row-major
        # (as np.nonzero gives them; flatnonzero's bool path is several times faster on (M, G))
        to = target[mi]
        there = self.compute[gi, to]  # (P,)
        delta = there - here[gi]
        d_compute = np.bincount(mi, delta, m_count) * scale
        d_compute_crit = np.bincount(mi, delta * crit[gi], m_count) * scale
        # transfers of graph inputs and results, and of every edge with an endpoint in the set
        host = cost.host
        d_io = (
            self.transfer(cost.input_bytes[gi], host, to) + self.transfer(cost.result_bytes[gi], to, host)
            - self.transfer(cost.input_bytes[gi], host, placement[gi])
            - self.transfer(cost.result_bytes[gi], placement[gi], host)
        )  # fmt: skip
        me, ee = self._touched(mi, gi)  # (Q,) touched (move, edge) pairs
        s_in, t_in = members[me, self.src[ee]], members[me, self.dst[ee]]
        src_dev = np.where(s_in, target[me], placement[self.src[ee]])
        dst_dev = np.where(t_in, target[me], placement[self.dst[ee]])
        old_edge = self.transfer(self.bytes, placement[self.src], placement[self.dst])  # (E,)
        d_edge = self.transfer(self.bytes[ee], src_dev, dst_dev) - old_edge[ee]
        edge_crit = np.maximum(crit[self.src], crit[self.dst])[ee]
        d_transfer = (np.bincount(me, d_edge, m_count) + np.bincount(mi, d_io, m_count)) * scale
        d_transfer_crit = (
            np.bincount(me, d_edge * edge_crit, m_count) + np.bincount(mi, d_io * crit[gi], m_count)
        ) * scale
        # neighbours outside the set (distinct per move), and which of them sit on the target device
        boundary = s_in != t_in
        other = np.where(s_in, self.dst[ee], self.src[ee])[boundary]
        pairs = sorted_unique(me[boundary] * g_count + other)
        pm, pg = pairs // g_count, pairs % g_count
        n_outside = np.bincount(pm, minlength=m_count)
        n_on_target = np.bincount(pm, placement[pg] == target[pm], m_count)
        invoke = np.asarray(cost.invoke_overhead, dtype=np.float64)
        invoke_new = np.where(n_on_target > 0, 0.0, invoke[target]) * scale
        left = (
            np.bincount(mi * d_count + placement[gi], minlength=m_count * d_count).reshape(m_count, d_count)
            > 0
        )
        left &= target[:, None] != np.arange(d_count)[None, :]  # devices each set leaves
        invoke_old = (left * invoke[None, :]).sum(axis=1) * scale
        load = np.bincount(placement, weights=here, minlength=d_count)  # (D,)
        load_target = load[target] * scale
        there_sum = np.bincount(mi, there, m_count)
        here_sum = np.bincount(mi, here[gi], m_count)
        load_source = (left * load[None, :]).sum(axis=1) * scale
        max_crit = np.zeros(m_count)
        np.maximum.at(max_crit, mi, crit[gi])
        size = np.bincount(mi, minlength=m_count)
        speed = np.clip(np.log(np.maximum(there_sum, 1e-12) / np.maximum(here_sum, 1e-12)), -3.0, 3.0)
        out = np.column_stack(
            [
                d_compute,
                d_compute_crit,
                d_transfer,
                d_transfer_crit,
                invoke_new,
                invoke_old,
                load_target,
                load_target + there_sum * scale,
                load_source,
                max_crit,
                np.log2(1 + size) / np.log2(1 + g_count),
                np.eye(len(KINDS))[moves.kind],  # (M, K)
                n_on_target / np.maximum(n_outside, 1),
                speed,
                (
                    self.estimate(self._rows(moves, placement), base=placement)
                    - self.estimate(placement[None, :])[0]
                )
                * scale,
            ]
        )
        return np.clip(out, -10.0, 10.0).astype(np.float32)


__all__ = [
    "KINDS",
    "MOVE_FEATURES",
    "SEGMENT_LENGTHS",
    "WINDOW_LENGTHS",
    "MoveFeaturizer",
    "Moves",
    "branch_sets",
    "fork_branches",
    "propose",
    "sorted_unique",
    "twin_classes",
]
