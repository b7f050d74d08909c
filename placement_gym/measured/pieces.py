"""The piecewise executor: every group compiled once per device configuration, placements chained from them.

The partitioned executor (:mod:`~placement_gym.measured.dataflow`) compiles each same-device *segment* of a
placement, so a never-seen placement costs seconds of compiling before its first run. This executor
compiles each *piece* (one group of the coarse graph: the groups are what a placement moves) once per
device configuration and runs any placement as the dataflow graph of its pieces, each on its group's
device, with the same drivers, the same per-device serialisation and the same shared tensors between
pieces. After the first placement a new placement compiles nothing: its cost is its runs.

Devices that OpenVINO compiles identically (same ``ov_device`` and ``compile_config()``, such as the
``local`` platform's two 1-thread virtual CPUs) share one compiled piece; which device runs it is the
plan's (:attr:`~placement_gym.measured.dataflow.Plan.devices`). A group runs once per inference, so a
shared piece is never busy twice at once.

What it measures differs from the partitioned executor in one way: the runtime cannot fuse layers across
a group boundary and every piece is started on its own (the ``threads`` driver, the default here, starts a
same-device chain with no thread handoff). ``experiments/fidelity/executor_agreement.py`` measures both on the same
placements (see docs/measured.md).

Compiled pieces are kept in an LRU bounded by a count (``max_pieces``) and by an estimate of their bytes
(``max_piece_bytes``: the weights the piece's ops fold in plus the tensors it writes); by default the
count holds every piece of every device configuration, so nothing is compiled twice.
"""

from __future__ import annotations

import numpy as np
import openvino as ov

from placement_gym.errors import BackendError
from placement_gym.graph import CompGraph
from placement_gym.measured.dataflow import PartitionedExecutor, Plan, _Compiled, device_classes
from placement_gym.measured.segments import Segment
from placement_gym.platforms.devices import Platform

__all__ = ["MAX_PIECE_BYTES", "PieceExecutor", "device_classes"]

#: Default bound on the estimated bytes of the compiled pieces kept (weights plus written tensors).
MAX_PIECE_BYTES = 2 << 30


class PieceExecutor(PartitionedExecutor):
    """Runs placements as dataflow graphs of per-group compiled pieces (see the module docstring).

    Args:
        model, graph, platform, core, inputs, run_timeout, driver, cores: As for
            :class:`~placement_gym.measured.dataflow.PartitionedExecutor` (``driver`` defaults to
            ``"threads"`` here).
        groups: Group of every op of ``graph``, shape ``(n,)``, int in ``0..G-1``, numbered in a
            topological order of the groups (:attr:`~placement_gym.coarsening.CoarseGraph.assignment`).
        max_pieces: Compiled pieces kept (LRU); default: every group on every device configuration.
        max_piece_bytes: Bound on the estimated bytes of the kept pieces (LRU; at least one piece is kept).

    Raises:
        BackendError: For ``groups`` of the wrong shape or limits below 1.
    """

    name = "pieces"

    def __init__(
        self,
        model: ov.Model,
        graph: CompGraph,
        platform: Platform,
        core: ov.Core,
        inputs: dict[str, np.ndarray],
        *,
        groups: np.ndarray,
        max_pieces: int | None = None,
        max_piece_bytes: int = MAX_PIECE_BYTES,
        run_timeout: float = 600.0,
        driver: str = "threads",
        cores: dict[int, int] | None = None,
    ) -> None:
        groups = np.asarray(groups)
        if groups.shape != (graph.num_nodes,) or (groups.size and groups.min() < 0):
            raise BackendError(
                f"groups must give each of the {graph.num_nodes} ops a group >= 0, got shape {groups.shape}"
            )
        super().__init__(
            model, graph, platform, core, inputs, run_timeout=run_timeout,
            driver=driver, cores=cores,
        )  # fmt: skip
        num_groups = int(groups.max()) + 1 if groups.size else 0
        order = np.argsort(groups, kind="stable")
        self.members = np.split(order, np.cumsum(np.bincount(groups, minlength=num_groups))[:-1])
        self.max_pieces = max_pieces if max_pieces is not None else num_groups * len(set(self.classes))
        self.max_piece_bytes = int(max_piece_bytes)
        if self.max_pieces < 1 or self.max_piece_bytes < 1:
            raise BackendError(
                f"max_pieces and max_piece_bytes must be >= 1, got {self.max_pieces} and {max_piece_bytes}"
            )
        weights = graph.nodes.get("param_bytes")
        self._weight_bytes = None if weights is None else np.asarray(weights, dtype=np.int64)
        self._segments: dict[tuple[int, int], Segment] = {}
        self._bytes: dict[tuple[int, bytes], int] = {}
        self.piece_bytes = 0  # estimated bytes of the kept pieces

    def piece(self, group: int, device: int) -> Segment:
        """The segment of ``group`` compiled for ``device``'s configuration (its ``device`` is the class's)."""
        key = (group, self.classes[device])
        found = self._segments.get(key)
        if found is None:
            found = self._segments[key] = self.index.segment(key[1], self.members[group])
        return found

    def prepare(self, op_device: np.ndarray) -> Plan:
        op_device = np.asarray(op_device)
        pieces = [(g, int(op_device[ops[0]])) for g, ops in enumerate(self.members) if ops.size]
        parts: list[_Compiled] = []
        for group, device in pieces:
            if np.any(op_device[self.members[group]] != device):
                raise BackendError(f"group {group} is split across devices; pieces need whole groups")
            parts.append(self._compile(self.piece(group, device)))
        return self._plan(parts, [d for _, d in pieces])

    def _compile(self, segment: Segment, model: ov.Model | None = None) -> _Compiled:
        key = segment.cache_key
        new = key not in self._compiled
        entry = super()._compile(segment, model)
        if new:
            self._bytes[key] = self._estimate(segment)
            self.piece_bytes += self._bytes[key]
        return entry

    def _estimate(self, segment: Segment) -> int:
        """Bytes a compiled piece holds, estimated: the weights its ops fold in plus the tensors it writes."""
        weights = int(self._weight_bytes[list(segment.ops)].sum()) if self._weight_bytes is not None else 0
        written = 0
        for key in segment.outputs:
            etype, shape = self.index.specs[key]
            written += int(np.prod(shape, dtype=np.int64)) * max(etype.size, 1)
        return weights + written

    def _evict(self) -> None:
        # plans hold references to their parts, so evicting never breaks a plan in use
        while len(self._compiled) > 1 and (
            len(self._compiled) > self.max_pieces or self.piece_bytes > self.max_piece_bytes
        ):
            key = next(iter(self._compiled))
            self._drop(key)
            self.piece_bytes -= self._bytes.pop(key)

    def is_warm(self, plan: Plan) -> bool:
        return all(p.runs > 0 for p in plan.parts)

    def close(self) -> None:
        super().close()
        self._bytes.clear()
        self.piece_bytes = 0
