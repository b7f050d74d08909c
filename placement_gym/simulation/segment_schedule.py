"""A schedule of a placement as the partitioned executor runs it: same-device *segments*, each one compiled
model, not single groups; compiled with numba.

The measured backend's :class:`~placement_gym.measured.dataflow.PartitionedExecutor` compiles every
segment of a placement (:func:`~placement_gym.measured.segments.split_segments`) as its own model and
runs them as a dataflow graph: a segment starts when all its inputs are ready and its device is free, and
its outputs appear when the whole segment ends. :class:`~placement_gym.simulation.schedule.Schedule`
models single groups and charges segment boundaries to links between devices; on the ``local`` platform,
where the executor splits a placement much more finely than into its connected same-device parts
(``iid`` placements of BERT: 61 segments more than parts on average) and where a boundary is work its
two segments do on their own devices, that undercounts what a placement costs
(``python -m experiments.fidelity.residuals --schedule segments``, ``docs/simulator.md``). Rules:

* **Segments.** Two groups joined by a same-device edge share a segment when they have the same
  other-device ancestors and the same other-device descendants: merging them makes nothing wait that
  did not wait before. This is :func:`~placement_gym.measured.segments.split_segments`' rule, applied to
  groups instead of ops (on the recorded ``sim_vs_measured`` placements it gives the executor's segments
  exactly on inception_v3 and a few fewer on resnet50 and bert, whose fused groups the executor may
  split).
* **Cost of a segment** on device ``d``: its groups' compute, plus ``invoke_overhead[d]`` (starting a
  compiled model), plus half of every boundary it reads or writes. One tensor crossing from one segment
  to another costs ``latency + bytes / bandwidth`` of the devices' link, half paid by the producer (its
  output reordered to a plain layout) and half by each consuming segment (read back); a boundary
  between two segments of the same device costs what a boundary to another device costs from it (the
  mean over its links). A group's output read by several groups of one segment is one tensor.
* **Order.** A device runs one segment at a time; of its ready segments, the one holding the
  lowest-numbered group first (the executor's topological order).
* **Contention.** Devices that share hardware slow each other down while both run: a segment that starts
  while another such device is busy runs ``contention x overlap`` longer, and so does the running one
  (``overlap``: the shorter of the new segment's cost and the running one's remaining time). On two
  devices this is processor sharing at ``1 / (1 + contention)`` of full speed each, so with contention 1
  (two virtual CPUs on one core) no placement beats the sum of its segments' costs. Charging the
  slowdown to the later segment alone, as the group schedule does, would let a short segment overlap a
  long one almost for free.
* Graph inputs and outputs are shared in memory with the host (the executor's tensors): no transfer.
  Memory is checked exactly as the group schedule does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from placement_gym.simulation.cost_model import CostModel
from placement_gym.simulation.schedule import Schedule, _find, _memory_overflow, outgoing_edges


@numba.njit(cache=True)
def segment_labels(
    dev: np.ndarray,  # (G,) int64: device of each group
    pred_ptr: np.ndarray,  # (G+1,) int64: CSR offsets of each group's incoming edges
    pred_src: np.ndarray,  # (E,) int64: source group of each incoming edge
    n_dev: int,
) -> tuple[np.ndarray, int]:
    """Segment of each group, shape ``(G,)`` int64 numbered by first group, and the number of segments.

    Groups must be numbered in a topological order (every edge goes from a lower to a higher index).
    """
    n = dev.shape[0]
    words = (n + 63) // 64
    one = np.uint64(1)
    anc = np.zeros((n, words), dtype=np.uint64)  # bitsets of ancestors
    desc = np.zeros((n, words), dtype=np.uint64)  # bitsets of descendants
    for g in range(n):
        for j in range(pred_ptr[g], pred_ptr[g + 1]):
            s = pred_src[j]
            for w in range(words):
                anc[g, w] |= anc[s, w]
            anc[g, s >> 6] |= one << np.uint64(s & 63)
    for g in range(n - 1, -1, -1):  # every successor of g has a higher index: desc[g] is complete
        for j in range(pred_ptr[g], pred_ptr[g + 1]):
            s = pred_src[j]
            for w in range(words):
                desc[s, w] |= desc[g, w]
            desc[s, g >> 6] |= one << np.uint64(g & 63)
    other = np.zeros((n_dev, words), dtype=np.uint64)  # groups not on each device
    for d in range(n_dev):
        for w in range(words):
            other[d, w] = ~np.uint64(0)
    for g in range(n):
        other[dev[g], g >> 6] &= ~(one << np.uint64(g & 63))
    parent = np.arange(n)
    for t in range(n):
        for j in range(pred_ptr[t], pred_ptr[t + 1]):
            s = pred_src[j]
            d = dev[s]
            if d != dev[t]:
                continue
            same = True
            for w in range(words):
                if ((anc[s, w] ^ anc[t, w]) | (desc[s, w] ^ desc[t, w])) & other[d, w]:
                    same = False
                    break
            if same:
                a, b = _find(parent, s), _find(parent, t)
                if a != b:
                    parent[b] = a
    label = np.full(n, -1, dtype=np.int64)
    root_label = np.full(n, -1, dtype=np.int64)
    count = 0
    for g in range(n):
        r = _find(parent, g)
        if root_label[r] < 0:
            root_label[r] = count
            count += 1
        label[g] = root_label[r]
    return label, count


@numba.njit(cache=True)
def _simulate_segments(
    dev: np.ndarray,  # (G,) int64
    pos: np.ndarray,  # (G,) int64: position in the memory check's order
    pred_ptr: np.ndarray,  # (G+1,) int64
    pred_src: np.ndarray,  # (E,) int64, grouped by destination
    pred_bytes: np.ndarray,  # (E,) float64
    last_use: np.ndarray,  # (G,) int64
    succ_ptr: np.ndarray,  # (G+1,) int64: CSR offsets of each group's outgoing edges
    succ_dst: np.ndarray,  # (E,) int64, grouped by source
    succ_bytes: np.ndarray,  # (E,) float64
    compute: np.ndarray,  # (G, D) float64
    latency: np.ndarray,  # (D, D) float64
    inv_bw: np.ndarray,  # (D, D) float64, 0 on the diagonal
    invoke: np.ndarray,  # (D,) float64
    input_bytes: np.ndarray,  # (G,) float64
    param_bytes: np.ndarray,  # (G,) float64
    out_bytes: np.ndarray,  # (G,) float64
    capacity: np.ndarray,  # (D,) float64
    contention: np.ndarray,  # (D, D) float64
) -> tuple[float, int, float]:
    """(latency, first device over capacity or -1, its peak bytes) of one placement ``dev``."""
    n_dev = capacity.shape[0]
    over, peak = _memory_overflow(
        dev, pos, pred_ptr, pred_src, pred_bytes, last_use, input_bytes, param_bytes, out_bytes, capacity
    )
    if over >= 0:
        return np.inf, over, peak
    n = dev.shape[0]
    seg, n_seg = segment_labels(dev, pred_ptr, pred_src, n_dev)
    # boundary figures between devices; between two segments of one device, what one to its other
    # devices costs (mean)
    b_lat = latency.copy()
    b_inv = inv_bw.copy()
    for d in range(n_dev):
        b_lat[d, d] = 0.0
        b_inv[d, d] = 0.0
        for k in range(n_dev):
            if k != d:
                b_lat[d, d] += latency[d, k] / (n_dev - 1)
                b_inv[d, d] += inv_bw[d, k] / (n_dev - 1)
    seg_dev = np.empty(n_seg, dtype=np.int64)
    cost = np.zeros(n_seg)
    for g in range(n):
        seg_dev[seg[g]] = dev[g]
        cost[seg[g]] += compute[g, dev[g]]
    for i in range(n_seg):
        cost[i] += invoke[seg_dev[i]]
    # boundaries (each output tensor once, each (tensor, reading segment) once) and segment edges
    mark = np.full(n_seg, -1, dtype=np.int64)
    best = np.zeros(n_seg)
    readers = np.empty(n_seg, dtype=np.int64)
    pair_src = np.empty(succ_dst.shape[0], dtype=np.int64)
    pair_dst = np.empty(succ_dst.shape[0], dtype=np.int64)
    n_pairs = 0
    for s in range(n):
        a = seg[s]
        da = seg_dev[a]
        n_readers = 0
        out_max = -1.0
        out_lat = 0.0
        out_inv = 0.0
        for j in range(succ_ptr[s], succ_ptr[s + 1]):
            b = seg[succ_dst[j]]
            if b == a:
                continue
            nbytes = succ_bytes[j]
            if mark[b] != s:
                mark[b] = s
                best[b] = nbytes
                readers[n_readers] = b
                n_readers += 1
            elif nbytes > best[b]:
                best[b] = nbytes
            if nbytes > out_max:
                out_max, out_lat, out_inv = nbytes, b_lat[da, seg_dev[b]], b_inv[da, seg_dev[b]]
        if n_readers:
            cost[a] += 0.5 * (out_lat + out_max * out_inv)
        for r in range(n_readers):
            b = readers[r]
            cost[b] += 0.5 * (b_lat[da, seg_dev[b]] + best[b] * b_inv[da, seg_dev[b]])
            pair_src[n_pairs] = a
            pair_dst[n_pairs] = b
            n_pairs += 1
    # segment dependency graph (CSR of users, deduplicated) and waiting counts
    keys = np.unique(pair_src[:n_pairs] * n_seg + pair_dst[:n_pairs])
    user_ptr = np.zeros(n_seg + 1, dtype=np.int64)
    waiting = np.zeros(n_seg, dtype=np.int64)
    for key in keys:
        user_ptr[key // n_seg + 1] += 1
        waiting[key % n_seg] += 1
    for i in range(n_seg):
        user_ptr[i + 1] += user_ptr[i]
    users = np.empty(keys.shape[0], dtype=np.int64)
    fill = user_ptr[:-1].copy()
    for key in keys:
        users[fill[key // n_seg]] = key % n_seg
        fill[key // n_seg] += 1
    # event loop: each idle device starts its lowest-numbered ready segment
    ready = waiting == 0
    started = np.zeros(n_seg, dtype=np.bool_)
    first = np.zeros(n_dev, dtype=np.int64)  # below it, every segment of the device has started
    running = np.full(n_dev, -1, dtype=np.int64)
    busy_until = np.zeros(n_dev)
    now = 0.0
    makespan = 0.0
    done = 0
    while done < n_seg:
        for d in range(n_dev):
            if running[d] >= 0:
                continue
            while first[d] < n_seg and (started[first[d]] or seg_dev[first[d]] != d):
                first[d] += 1
            pick = -1
            for i in range(first[d], n_seg):
                if ready[i] and seg_dev[i] == d:
                    pick = i
                    break
            if pick < 0:
                continue
            ready[pick] = False
            started[pick] = True
            c = cost[pick]
            extra = 0.0
            for o in range(n_dev):
                if o != d and running[o] >= 0 and contention[d, o] > 0.0 and busy_until[o] > now:
                    overlap = min(c, busy_until[o] - now)
                    extra += contention[d, o] * overlap
                    busy_until[o] += contention[o, d] * overlap  # the running segment slows down too
            running[d] = pick
            busy_until[d] = now + c + extra
        nxt = -1
        for d in range(n_dev):
            if running[d] >= 0 and (nxt < 0 or busy_until[d] < busy_until[nxt]):
                nxt = d
        if nxt < 0:  # a NaN cost stalls the comparisons; report it as NaN
            return np.nan, -1, 0.0
        now = busy_until[nxt]
        if now > makespan or now != now:
            makespan = now
        i = running[nxt]
        running[nxt] = -1
        done += 1
        for k in range(user_ptr[i], user_ptr[i + 1]):
            u = users[k]
            waiting[u] -= 1
            if waiting[u] == 0:
                ready[u] = True
    return makespan, -1, 0.0


@numba.njit(cache=True)
def _simulate_segments_batch(
    placements: np.ndarray,  # (B, G) int64
    pos: np.ndarray,
    pred_ptr: np.ndarray,
    pred_src: np.ndarray,
    pred_bytes: np.ndarray,
    last_use: np.ndarray,
    succ_ptr: np.ndarray,
    succ_dst: np.ndarray,
    succ_bytes: np.ndarray,
    compute: np.ndarray,
    latency: np.ndarray,
    inv_bw: np.ndarray,
    invoke: np.ndarray,
    input_bytes: np.ndarray,
    param_bytes: np.ndarray,
    out_bytes: np.ndarray,
    capacity: np.ndarray,
    contention: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_simulate_segments` over the rows of ``placements``; three arrays of shape ``(B,)``."""
    n = placements.shape[0]
    lat = np.empty(n)
    over = np.empty(n, dtype=np.int64)
    peak = np.empty(n)
    for i in range(n):
        lat[i], over[i], peak[i] = _simulate_segments(
            placements[i], pos, pred_ptr, pred_src, pred_bytes, last_use, succ_ptr, succ_dst, succ_bytes,
            compute, latency, inv_bw, invoke, input_bytes, param_bytes, out_bytes, capacity, contention,
        )  # fmt: skip
    return lat, over, peak


@dataclass(frozen=True, eq=False)
class SegmentSchedule:
    """The placement-independent arrays of the segment schedule of one cost model (see the module
    docstring); :meth:`run` and :meth:`run_batch` as :class:`~placement_gym.simulation.schedule.Schedule`'s.

    Attributes:
        groups: The group schedule of the same cost model (its order, edges and memory check).
        succ_ptr: CSR offsets of each group's outgoing edges, shape ``(G+1,)``.
        succ_dst: Destination of each outgoing edge, shape ``(E,)``.
        succ_bytes: Bytes of each outgoing edge, shape ``(E,)``.
    """

    groups: Schedule
    succ_ptr: np.ndarray
    succ_dst: np.ndarray
    succ_bytes: np.ndarray

    @property
    def cost(self) -> CostModel:
        return self.groups.cost

    @classmethod
    def build(cls, cost: CostModel) -> SegmentSchedule:
        """The segment schedule of ``cost``."""
        succ_ptr, succ_dst, succ_bytes = outgoing_edges(cost)
        return cls(groups=Schedule.build(cost), succ_ptr=succ_ptr, succ_dst=succ_dst, succ_bytes=succ_bytes)

    def _args(self) -> tuple:
        s, c = self.groups, self.cost
        return (
            s.pos, s.pred_ptr, s.pred_src, s.pred_bytes, s.last_use, self.succ_ptr, self.succ_dst,
            self.succ_bytes, np.ascontiguousarray(c.compute, dtype=np.float64), c.link_latency, s.inv_bw,
            c.invoke_overhead, c.input_bytes, c.param_bytes, c.out_bytes, c.capacity,
            np.ascontiguousarray(c.contention, dtype=np.float64),
        )  # fmt: skip

    def __post_init__(self) -> None:
        object.__setattr__(self, "_packed", self._args())

    def run(self, placement: np.ndarray) -> tuple[float, int, float]:
        """``(latency, device over capacity or -1, its peak bytes)`` of a valid int64 placement ``(G,)``."""
        return _simulate_segments(placement, *self._packed)

    def run_batch(self, placements: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`run` over a valid int64 batch ``(B, G)``; three arrays of shape ``(B,)``."""
        return _simulate_segments_batch(np.ascontiguousarray(placements, dtype=np.int64), *self._packed)

    def segments(self, placement: np.ndarray) -> np.ndarray:
        """Segment of each group under ``placement``, shape ``(G,)`` int64 (numbered by first group)."""
        p = np.ascontiguousarray(placement, dtype=np.int64)
        return segment_labels(p, self.groups.pred_ptr, self.groups.pred_src, self.cost.num_devices)[0]
