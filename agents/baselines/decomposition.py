"""Cutting the simulator's schedule into independent segments, for the exact solver (:mod:`agents.baselines.segment_solver`).

The simulator (:mod:`placement_gym.simulation.schedule`) takes groups in one fixed priority order. Call
position ``k`` of that order a **cut** when the group ``v`` there separates the schedule:

* every group before ``v`` in the order is an ancestor of ``v``, and every group after it a descendant;
* no group after ``v`` reads graph inputs, and no group up to ``v`` (except a last group) returns results;
* edges that jump over ``v`` (from a group before it to one after it) leave from at most ``max_dropped``
  groups.

Without jumping edges, when ``v`` finishes at ``C`` every device and link is idle (each earlier group and
copy fed ``v``, so it ended before ``v`` started), and every later event waits, through ``v``, for ``C``.
The schedule after ``v`` is then the same list schedule shifted by ``C``, and it depends on the placement
before ``v`` only through ``v``'s device. So the latency is a sum over segments, each a function of its own
groups' devices and the devices of its two end groups, and the optimum is a shortest path over
``(cut, device of its group)`` (:mod:`agents.baselines.segment_solver`).

A jumping edge (BERT's attention mask feeds all twelve layers) breaks this. A segment's **model** drops
the edges that jump into it: without them its groups can only start earlier (every time in the schedule
is a max of sums, and a dropped copy also leaves its link free sooner), so the sum of the segments'
optima is a lower bound of the true optimum, which the exact solver checks against the simulated latency
of the placement it assembles. A dropped edge between two groups on a device with an invoke overhead
would join their subgraphs, and through later groups even subgraphs of earlier segments, so a segment's
model could charge an overhead the real schedule does not: that is not a relaxation. With one source
pinned to such a device ``v`` (``prepaid=v``), the model keeps the overheads and marks as already started
on ``v`` (:attr:`~placement_gym.simulation.schedule.Schedule.prepaid`) the subgraphs of the dropped edges'
targets (joined to the source's, which started before the segment: exact) and of the anchor (started
before the cut: exact, and no offset). The segment's last group may join the source's subgraph through later
segments: the exact solver carries that as a status per cut (:mod:`agents.baselines.mask_status`) and
builds each segment's model with and without that group counted as started (``started``). With several
sources, the exact solver models every segment with the invoke overheads of the ``free_invoke`` devices
set to 0.

A segment's model may also carry a **penalty** per (own group, device), seconds added to its time: a cost
that is a sum over groups stays a sum over segments, so the shortest path still minimises latency plus
penalty (the Lagrangian relaxation of memory in :mod:`agents.baselines.exact_memory`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from placement_gym.simulation.cost_model import CostModel
from placement_gym.simulation.schedule import Schedule


@dataclass(frozen=True)
class Segment:
    """Groups of the schedule between two cuts.

    Attributes:
        anchor: The group at the previous cut (its device is given), or -1 for the first segment.
        groups: The segment's own groups in schedule order; the last is the next cut's group (or the
            schedule's last group).
        dropped: Edges ``(source, destination)`` into the segment from groups before the anchor.
        last: Whether this is the last segment (its time includes the copies of results to the host).
    """

    anchor: int
    groups: tuple[int, ...]
    dropped: tuple[tuple[int, int], ...]
    last: bool

    @property
    def end(self) -> int:
        return self.groups[-1]


def _ancestors(cost: CostModel, order: np.ndarray) -> list[int]:
    """Bitmask of each group's ancestors (Python ints), filled in topological ``order``."""
    preds: list[list[int]] = [[] for _ in range(cost.num_groups)]
    for s, t in zip(cost.edge_src.tolist(), cost.edge_dst.tolist()):
        preds[t].append(s)
    anc = [0] * cost.num_groups
    for g in order.tolist():
        for p in preds[g]:
            anc[g] |= anc[p] | (1 << p)
    return anc


def find_cuts(cost: CostModel, sched: Schedule, max_dropped: int = 1) -> list[tuple[int, frozenset[int]]]:
    """Positions of the schedule's cuts (see the module docstring), increasing, each with the groups whose
    edges jump over it.

    Args:
        cost: The cost model.
        sched: Its schedule (the order).
        max_dropped: Most groups allowed to have edges jumping over a cut.
    """
    g_count, order, pos = cost.num_groups, sched.order, sched.pos
    anc = _ancestors(cost, order)
    src_pos, dst_pos = pos[cost.edge_src], pos[cost.edge_dst]
    has_input = cost.input_bytes[order] > 0  # (G,) by position
    has_result = cost.result_bytes[order] > 0
    later_input = np.cumsum(has_input[::-1])[::-1]  # inputs at positions >= k
    earlier_result = np.cumsum(has_result)  # results at positions <= k
    prefix = 0  # bitmask of the groups before position k
    cuts = []
    for k in range(g_count - 1):
        v = int(order[k])
        jumping = frozenset(cost.edge_src[(src_pos < k) & (dst_pos > k)].tolist())
        clean_io = later_input[k + 1] == 0 and earlier_result[k] == 0
        if clean_io and len(jumping) <= max_dropped and (anc[v] & prefix) == prefix:
            later = order[k + 1 :].tolist()
            if all(anc[w] >> v & 1 for w in later):
                cuts.append((k, jumping))
        prefix |= 1 << v
    return cuts


def segments(
    cost: CostModel, sched: Schedule, max_dropped: int = 1, max_segment: int | None = None
) -> list[Segment]:
    """The schedule cut into consecutive segments.

    Args:
        cost: The cost model.
        sched: Its schedule.
        max_dropped: Most groups allowed to have edges jumping over a cut.
        max_segment: If given, cut with jumping edges only inside the segments of the clean cuts (no
            jumping edge) that have more groups than this, and only where the ``max_dropped`` groups that
            jump over most such cuts are the only ones jumping; ``None``: at every cut of :func:`find_cuts`.
    """
    order, pos = sched.order, sched.pos
    found = find_cuts(cost, sched, max_dropped)
    cuts = [k for k, _ in found]
    if max_segment is not None and max_dropped > 0:
        clean = [k for k, jumping in found if not jumping]
        edges = [-1] + clean + [cost.num_groups - 1]
        large = [(lo, hi) for lo, hi in zip(edges, edges[1:]) if hi - lo > max_segment]
        inside = [(k, jumping) for k, jumping in found if jumping and any(lo < k < hi for lo, hi in large)]
        # the groups that jump over most of those cuts (BERT's attention mask), and only cuts they jump
        counts = Counter(g for _, jumping in inside for g in jumping)
        chosen = {g for g, _ in counts.most_common(max_dropped)}
        cuts = sorted(set(clean) | {k for k, jumping in inside if jumping <= chosen})
    bounds = [-1] + cuts + [cost.num_groups - 1]
    out = []
    for i in range(len(bounds) - 1):
        lo, hi = bounds[i], bounds[i + 1]
        anchor = int(order[lo]) if lo >= 0 else -1
        groups = tuple(int(g) for g in order[lo + 1 : hi + 1])
        members = set(groups)
        dropped = tuple(
            (int(s), int(t))
            for s, t in zip(cost.edge_src.tolist(), cost.edge_dst.tolist())
            if t in members and pos[s] < lo
        )
        out.append(Segment(anchor, groups, dropped, last=i == len(bounds) - 2))
    return out


@dataclass(frozen=True, eq=False)
class SegmentModel:
    """A segment as a cost model of its own, scheduled in the whole graph's order.

    Attributes:
        cost: The segment's cost model: its groups, and the anchor first in the order with no compute
            (pinned by the caller to the anchor's device).
        schedule: Its schedule, in the whole graph's order.
        groups: Global index of each of its groups, shape ``(g,)`` (increasing, so that every group's
            input edges keep the order the whole graph's schedule queues them in).
        anchor: Its index of the anchor, or -1.
        end: Its index of the segment's last group.
        penalty: Seconds added to the segment's time per (group, device), shape ``(g, D)`` (0 for the
            anchor, whose penalty belongs to the segment before).
    """

    cost: CostModel
    schedule: Schedule
    groups: np.ndarray
    anchor: int
    end: int
    penalty: np.ndarray

    def penalties(self, placements: np.ndarray) -> np.ndarray:
        """Total penalty of each of the model's placements ``(B, g)``, shape ``(B,)``."""
        return self.penalty[np.arange(len(self.groups)), placements].sum(axis=-1)

    def offset(self, anchor_device: int) -> float:
        """Seconds the model's time runs ahead of the segment's: the anchor's invoke overhead, which the
        model charges at its start (in the real schedule it was charged before the cut), unless the anchor
        is prepaid on that device."""
        if self.anchor < 0 or self.schedule.prepaid[self.anchor] == anchor_device:
            return 0.0
        return float(self.cost.invoke_overhead[anchor_device])


def segment_model(
    cost: CostModel,
    sched: Schedule,
    seg: Segment,
    free_invoke: np.ndarray,
    penalty: np.ndarray | None = None,
    prepaid: int | None = None,
    started: tuple[int, ...] = (),
) -> SegmentModel:
    """The cost model of ``seg`` (see :class:`SegmentModel`).

    Args:
        cost: The whole graph's cost model.
        sched: Its schedule.
        seg: The segment.
        free_invoke: Devices whose invoke overhead is set to 0, shape ``(D,)``, bool (see the module
            docstring).
        penalty: Seconds added per (group, device) of the whole graph, shape ``(G, D)``; ``None``: none.
        prepaid: The device of the dropped edges' one source (see the module docstring), or ``None``.
        started: More of the segment's groups to count as started on ``prepaid`` (the end group whose
            subgraph joins the source's later: :mod:`agents.baselines.mask_status`).
    """
    members = list(seg.groups) + ([seg.anchor] if seg.anchor >= 0 else [])
    groups = np.array(sorted(members), dtype=np.int64)
    local = {int(g): i for i, g in enumerate(groups)}
    keep = [
        j
        for j, (s, t) in enumerate(zip(cost.edge_src.tolist(), cost.edge_dst.tolist()))
        if s in local and t in local
    ]
    compute = cost.compute[groups].copy()
    inputs, results = cost.input_bytes[groups].copy(), cost.result_bytes[groups].copy()
    anchor = local[seg.anchor] if seg.anchor >= 0 else -1
    if anchor >= 0:
        compute[anchor] = 0.0
        inputs[anchor] = results[anchor] = 0.0
    invoke = cost.invoke_overhead.copy()
    invoke[free_invoke] = 0.0
    sub = CostModel(
        device_names=cost.device_names,
        compute=compute,
        edge_src=np.array([local[int(cost.edge_src[j])] for j in keep], dtype=np.int64),
        edge_dst=np.array([local[int(cost.edge_dst[j])] for j in keep], dtype=np.int64),
        edge_bytes=cost.edge_bytes[keep].astype(np.float64),
        link_latency=cost.link_latency.copy(),
        link_bandwidth=cost.link_bandwidth.copy(),
        param_bytes=cost.param_bytes[groups].copy(),
        out_bytes=cost.out_bytes[groups].copy(),
        input_bytes=inputs,
        result_bytes=results,
        capacity=np.full(cost.num_devices, np.inf),
        invoke_overhead=invoke,
        host=cost.host,
        contention=cost.contention.copy(),
        meta={"segment_of": cost.meta.get("model")},
    )
    order = [seg.anchor] if seg.anchor >= 0 else []
    order = np.array([local[g] for g in order + list(seg.groups)], dtype=np.int64)
    own_penalty = np.zeros((len(groups), cost.num_devices))  # (g, D)
    if penalty is not None:
        own_penalty[:] = penalty[groups]
        if anchor >= 0:
            own_penalty[anchor] = 0.0
    first = np.full(len(groups), -1, dtype=np.int64)
    if prepaid is not None:
        heads = {t for _, t in seg.dropped} | ({seg.anchor} if seg.anchor >= 0 else set()) | set(started)
        first[[local[g] for g in heads]] = prepaid
    schedule = Schedule.build(sub, order, first)
    return SegmentModel(sub, schedule, groups, anchor, local[seg.end], own_penalty)


def memory_can_bind(cost: CostModel) -> bool:
    """Whether some placement could overfill some device: the segments' models ignore memory, so the exact
    solver decomposes only when this is False (every group's weights, outputs, inputs and received copies
    together fit on every device)."""
    worst = cost.param_bytes.sum() + cost.out_bytes.sum() + cost.input_bytes.sum() + cost.edge_bytes.sum()
    return bool(np.any(worst > cost.capacity))
