"""Segment tables that carry, per cut, whether the cut group's subgraph joins the subgraph of a dropped
edges' source: the exact treatment of BERT's attention mask on a device with an invoke overhead, for the
exact solver (:mod:`agents.baselines.segment_solver`).

Setting (see :mod:`agents.baselines.decomposition`): one group ``s`` (the mask) has edges that jump over
the cuts; they are dropped from the segments' models; ``s`` lies in the first segment and is pinned to a
device ``v`` with an invoke overhead. A dropped edge ``s -> t`` with ``t`` on ``v`` joins ``t``'s subgraph
to ``s``'s, which started before ``t``'s segment, so the models count such targets as started (exact), and
the anchor too (its subgraph started before the cut: exact). What remains is the segment's last group
(the next cut's group) on ``v``: its subgraph may join ``s``'s through later segments. Each cut whose group
runs on ``v`` therefore gets a **status**:

* ``J`` (joined): its subgraph contains ``s`` through the segments up to the cut;
* ``P`` (pending): it does not, but it does through later segments;
* ``F`` (free): it never contains ``s``.

A segment's time is then exact given its two statuses: the end group counts as started iff its status is
``J`` or ``P`` (under ``J`` it already contains a started group). The statuses of consecutive cuts must agree
with the segment's placement, which an enumerated segment checks from its same-device components on ``v``
(``L``: the anchor's and the end's are one; ``Ta`` / ``Te``: the anchor's / the end's holds a target of
``s``, or ``s`` itself in the first segment):

* ``L``: the statuses pass through (``J -> J``; ``P -> J`` if a target is in the component, else ``P -> P``;
  ``F -> F`` and no target);
* not ``L``: an anchor ``P`` needs ``Ta`` and an anchor ``F`` needs not ``Ta``; the end is ``J`` iff ``Te``, else
  ``P`` or ``F``; the last segment's end is never ``P``.

The source's own segment: before it no cut is ``J``, and an anchor ``P`` there (a subgraph that reaches
``s`` through this segment) counts ``s`` as started too. A ``P`` end there joins ``s``'s part only later, and
the real schedule charges the joined subgraph once, at the first group of either part: an enumerated
segment counts as started whichever part starts later (exact); a MILP segment counts both (a relaxation of
one overhead). A segment solved by MILP cannot check the statuses: its table allows every transition (a
relaxation). The shortest path over ``(cut, state)`` then bounds the optimum from below; the dropped edges'
copies are the other relaxation (:mod:`agents.baselines.decomposition`).

States of a cut: device ``d`` for ``d != v``; for ``v``: index ``v`` is ``F``, ``D`` is ``J`` and ``D + 1``
is ``P`` (``S = D + 2`` states).
"""

from __future__ import annotations

import numpy as np

from agents.baselines.decomposition import SegmentModel

FREE, JOINED, PENDING = 0, 1, 2


def state_devices(d_count: int, v: int) -> np.ndarray:
    """Device of each state, shape ``(D + 2,)``."""
    return np.array([*range(d_count), v, v], dtype=np.int64)


def state_status(d_count: int, v: int) -> np.ndarray:
    """Status of each state (``FREE`` for the devices other than ``v``, which carry none), shape ``(D + 2,)``."""
    status = np.full(d_count + 2, FREE, dtype=np.int64)
    status[d_count], status[d_count + 1] = JOINED, PENDING
    return status


def components(placements: np.ndarray, src: np.ndarray, dst: np.ndarray, v: int) -> np.ndarray:
    """Same-device components on ``v``: a label per (placement, group), the smallest local index in the
    group's component (groups off ``v`` keep their own index), shape ``(B, g)``."""
    labels = np.broadcast_to(np.arange(placements.shape[1]), placements.shape).copy()
    on = placements == v
    both = on[:, src] & on[:, dst]  # (B, E)
    for _ in range(placements.shape[1]):
        changed = False
        for j in range(len(src)):
            a, b = labels[:, src[j]], labels[:, dst[j]]
            low = np.where(both[:, j], np.minimum(a, b), -1)
            update = both[:, j] & ((a != low) | (b != low))
            if update.any():
                labels[update, src[j]] = low[update]
                labels[update, dst[j]] = low[update]
                changed = True
        if not changed:
            break
    return labels


def allowed_transition(
    sa: int | None, se: int | None, linked: np.ndarray, t_anchor: np.ndarray, t_end: np.ndarray
) -> np.ndarray:
    """Which placements of a batch allow anchor status ``sa`` and end status ``se`` (``None``: that group is
    not on ``v``), given their flags ``linked`` (``L``), ``t_anchor`` (``Ta``), ``t_end`` (``Te``), each
    ``(B,)`` bool; see the module docstring. Shape ``(B,)``."""
    ok = np.ones(len(linked), dtype=bool)
    if sa == PENDING:  # the anchor's subgraph reaches s here, or hands the promise on to the end
        ok &= linked | t_anchor
    elif sa == FREE:
        ok &= ~t_anchor
    if se is None:
        return ok
    if sa is not None:  # linked: the end's status follows the anchor's
        follows = {JOINED: np.full(len(linked), JOINED), FREE: np.full(len(linked), FREE)}.get(
            sa, np.where(t_end, JOINED, PENDING)
        )
        ok &= ~linked | (follows == se)
    unlinked = ~linked if sa is not None else np.ones(len(linked), dtype=bool)
    own = (t_end & (se == JOINED)) | (~t_end & (se != JOINED))  # J iff s's subgraph is in the end's part
    return ok & (~unlinked | own)


class StatusTable:
    """A segment's shortest times per (anchor state, end state), shape ``(S, S)`` (see the module docstring).

    Built either by enumeration (exact transitions) or over :class:`~agents.baselines.segment_solver.SegmentTable` s
    of the segment's first three model variants, with every transition allowed.

    Args:
        models: The segment's model variants: 0 none of the groups below counted as started, 1 the end
            (and, in the source's segment, ``s``) counted as started; in the source's segment also 2 ``s``
            alone and 3 the end alone (see :meth:`_variant`).
        allowed: Devices each model group may use, shape ``(g, D)``.
        v: The device of ``s``.
        heads: Model indices of the groups that join ``s``'s subgraph when on ``v``: the dropped edges'
            targets, ``s`` itself in its own segment, none before it.
        last: Whether this is the last segment.
        tables: Segment tables of ``models[:3]`` to build over instead of enumerating (the third ``None`` in a
            segment without an anchor); ``None``: enumerate.
    """

    def __init__(
        self,
        models: tuple[SegmentModel, ...],
        allowed: np.ndarray,
        v: int,
        heads: list[int],
        last: bool,
        tables: tuple | None = None,
    ) -> None:
        plain = models[0]
        self.model, self.v, self.last = plain, v, last
        d_count = plain.cost.num_devices
        self.devices, self.status = state_devices(d_count, v), state_status(d_count, v)
        self.tables = tables
        self.has_source = len(models) > 2
        s_count = d_count + 2
        self.placements: dict[tuple[int, int], np.ndarray] = {}
        if tables is not None:
            self.solver = (
                "milp" if any(t is not None and t.solver == "milp" for t in tables) else "enumeration"
            )
            return
        self.solver = "enumeration"
        self._best = np.full((s_count, s_count), np.inf)
        anchors = np.flatnonzero(allowed[plain.anchor]).tolist() if plain.anchor >= 0 else [None]
        for a in anchors:
            self._enumerate(models, allowed, heads, a)

    # ------------------------------------------------------------------ tables
    def _variant(self, row: int, end: int) -> int:
        """Which model prices pair ``(row, end)``: 1 (the end, and in the source's segment the source,
        counted as started) for a pending end, 2 (the source counted as started) for a pending anchor of
        the source's segment, else 0; an enumerated source's segment prices a pending end after a
        non-pending anchor with 4: the source's or the end's part counted as started, whichever starts
        later (the joined subgraph pays once, at its first group)."""
        pending_anchor = (
            self.status[row] == PENDING and self.devices[row] == self.v and self.model.anchor >= 0
        )
        if self.status[end] == PENDING and self.devices[end] == self.v:
            return 4 if self.has_source and self.tables is None and not pending_anchor else 1
        if self.status[row] == PENDING and self.devices[row] == self.v and self.model.anchor >= 0:
            return 2 if self.has_source else 0
        return 0

    def _over_tables(self, which: str) -> np.ndarray:
        values = [getattr(t, which) if t is not None else None for t in self.tables]
        s_count = len(self.devices)
        table = np.empty((s_count, s_count))
        for row in range(s_count):
            for end in range(s_count):
                variant = values[self._variant(row, end)]  # None only where the variant is never used
                table[row, end] = (
                    variant[self.devices[row], self.devices[end]] if variant is not None else np.inf
                )
        if self.last:
            table[:, self.status == PENDING] = np.inf
        return table

    @property
    def bound(self) -> np.ndarray:
        """A lower bound per (anchor state, end state), shape ``(S, S)``."""
        return self._best if self.tables is None else self._over_tables("bound")

    @property
    def best(self) -> np.ndarray:
        """The best time found per (anchor state, end state), shape ``(S, S)``."""
        return self._best if self.tables is None else self._over_tables("best")

    def placement(self, row: int, end: int) -> np.ndarray:
        """The model placement of the best time of pair ``(row, end)``."""
        if self.tables is None:
            return self.placements[(row, end)]
        table = self.tables[self._variant(row, end)]
        return table.placements[(int(self.devices[row]), int(self.devices[end]))]

    def refine(self, row: int, end: int) -> bool:
        """Learn more about pair ``(row, end)``; False if nothing more can be learnt."""
        if self.tables is None:
            return False
        table = self.tables[self._variant(row, end)]
        return table.refine(int(self.devices[row]), int(self.devices[end]))

    # ------------------------------------------------------------------ enumeration
    def _enumerate(
        self,
        models: tuple[SegmentModel, ...],
        allowed: np.ndarray,
        heads: list[int],
        anchor: int | None,
    ) -> None:
        plain = models[0]
        g, v = len(plain.groups), self.v
        d_count = allowed.shape[1]
        rows = [allowed[i] if i != plain.anchor else np.eye(d_count, dtype=bool)[anchor] for i in range(g)]
        choices = [np.flatnonzero(r) for r in rows]
        sizes = [len(c) for c in choices]
        total = int(np.prod(sizes))
        src, dst = plain.cost.edge_src, plain.cost.edge_dst
        for lo in range(0, total, 1 << 16):
            index = np.unravel_index(np.arange(lo, min(total, lo + (1 << 16))), sizes)
            block = np.stack([c[i] for c, i in zip(choices, index)], axis=1).astype(np.int64)  # (B, g)
            offset = plain.offset(anchor) if anchor is not None else 0.0
            extra = plain.penalties(block) - offset
            times = [m.schedule.run_batch(block)[0] + extra if m is not None else None for m in models]
            labels = components(block, src, dst, v)  # (B, g)
            on = block == v
            end_on, end_label = on[:, plain.end], labels[:, plain.end]
            t_end = np.zeros(len(block), dtype=bool)
            t_anchor = np.zeros(len(block), dtype=bool)
            for h in heads:
                t_end |= on[:, h] & end_on & (labels[:, h] == end_label)
                if plain.anchor >= 0:
                    t_anchor |= on[:, h] & on[:, plain.anchor] & (labels[:, h] == labels[:, plain.anchor])
            linked = (
                on[:, plain.anchor] & end_on & (labels[:, plain.anchor] == end_label)
                if plain.anchor >= 0
                else np.zeros(len(block), dtype=bool)
            )
            if self.has_source:
                # a pending end of the source's segment: the joined subgraph pays once, at the first of the
                # two parts' heads in the order; count the other part as started (exact)
                pos = plain.schedule.pos
                first_s = np.min(np.where(labels == labels[:, heads[0] : heads[0] + 1], pos, g), axis=1)
                first_e = np.min(np.where(labels == end_label[:, None], pos, g), axis=1)
                times.append(np.where(first_s < first_e, times[3], times[2]))
            self._record(block, times, anchor, linked, t_anchor, t_end)

    def _record(
        self,
        block: np.ndarray,
        times: list[np.ndarray | None],
        anchor: int | None,
        linked: np.ndarray,
        t_anchor: np.ndarray,
        t_end: np.ndarray,
    ) -> None:
        """Keep, per (anchor state, end state) its transition allows, the fastest placement of ``block``."""
        d_count, v = len(self.devices) - 2, self.v
        ends = block[:, self.model.end]  # (B,)
        row_states = [0] if anchor is None else [s for s in range(d_count + 2) if self.devices[s] == anchor]
        for row in row_states:
            sa = self.status[row] if anchor == v else None
            for end in range(d_count + 2):
                b = int(self.devices[end])
                ok = ends == b
                se = self.status[end] if b == v else None
                if se == PENDING and self.last:
                    continue
                ok &= allowed_transition(sa, se, linked, t_anchor, t_end)
                if not ok.any():
                    continue
                value = np.where(ok, times[self._variant(row, end)], np.inf)
                i = int(np.argmin(value))
                if value[i] < self._best[row, end]:
                    self._best[row, end] = float(value[i])
                    self.placements[(row, end)] = block[i].copy()
