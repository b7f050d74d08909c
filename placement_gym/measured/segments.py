"""Split a per-op device placement into same-device segments and build each segment as an ``ov.Model``.

A *segment* is a connected set of ops on one device, compiled as one model. :func:`split_segments`
merges same-device ops along their edges while the quotient graph of the segments stays a DAG (so the
segments can run in a dataflow order) and no merge costs concurrency between devices.

Tensors are named by *source keys*: ``(op, port)`` for output ``port`` of op graph node ``op``, and
``(-1 - i, 0)`` for the model's ``i``-th Parameter. A segment reads the keys produced outside it and
writes the keys consumed outside it (by another segment or a model Result). Constants, and ops computed
from constants only (folded into their consumers by :mod:`placement_gym.ov_graph`), are not graph nodes:
they travel with every segment that consumes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import openvino as ov
import openvino.opset13 as opset

from placement_gym.coarsening import canonical_assignment
from placement_gym.dag_merge import DagMerge
from placement_gym.errors import BackendError
from placement_gym.graph import CompGraph

Key = tuple[int, int]  # (op index, output port); model Parameter i is (-1 - i, 0)


def param_key(i: int) -> Key:
    """Source key of the model's ``i``-th Parameter."""
    return (-1 - i, 0)


@dataclass(frozen=True)
class Segment:
    """A connected set of ops on one device, with the tensors it reads and writes.

    Attributes:
        device: Index of the device (into ``platform.devices``).
        ops: Op graph node indices, ascending (a topological order), shape ``(k,)``.
        inputs: Source keys read from outside the segment, in the order of the built model's Parameters.
        outputs: Source keys written for other segments or model outputs, in the order of its Results.
    """

    device: int
    ops: tuple[int, ...]
    inputs: tuple[Key, ...]
    outputs: tuple[Key, ...]

    @property
    def cache_key(self) -> tuple[int, bytes]:
        """Identity for compiled-model caches: the device and the op set."""
        return (self.device, np.asarray(self.ops, dtype=np.int32).tobytes())


def _only_same_device(
    state: DagMerge, device: list[int], frontier: set[int], known: set[int], *, forward: bool, dev: int
) -> bool:
    """Whether every segment reachable from ``frontier`` without entering ``known`` is on device ``dev``."""
    step = state.succ if forward else state.pred
    stack = [s for s in frontier if s not in known]
    seen = set(stack)
    while stack:
        g = stack.pop()
        if device[g] != dev:
            return False
        for s in step[g]:
            if s not in known and s not in seen:
                seen.add(s)
                stack.append(s)
    return True


def _harmless(state: DagMerge, device: list[int], a: int, b: int) -> bool:
    """Whether merging segment ``a`` with its successor ``b`` (same device) keeps the quotient a DAG and
    delays no other device's work.

    Merged, ``b``'s ops wait for everything ``a`` waits for and ``a``'s outputs appear when ``b``'s ops
    are done. That costs nothing across devices if every other-device segment upstream of ``b`` is already
    upstream of ``a``, and every other-device segment downstream of ``a`` is already downstream of ``b``.
    Same-device segments in between are fine: the device runs one segment at a time anyway.
    """
    if state.reaches(a, b, indirect=True):
        return False
    dev = device[a]
    upstream_a = state.closure(a, forward=False)
    if not _only_same_device(state, device, state.pred[b], upstream_a, forward=False, dev=dev):
        return False
    downstream_b = state.closure(b, forward=True)
    return _only_same_device(state, device, state.succ[a], downstream_b, forward=True, dev=dev)


def split_segments(graph: CompGraph, op_device: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Connected same-device segments, as large as possible without losing concurrency.

    Same-device edges are contracted, in edge order, when :func:`_harmless`: the quotient stays a DAG, no
    op has to wait for another device's output it did not depend on before, and no other device has to
    wait for ops its input does not depend on. Passes repeat until none succeeds (a merge can make a
    rejected one legal).

    Plain maximal DAG-preserving merging would be wrong for concurrency: with two branches on two
    devices joined at the end, the join would merge into one branch's segment, which then cannot start
    before the other branch ends, so the branches would never overlap. With one device, each connected
    part of the graph becomes one segment.

    Args:
        graph: The op graph, ``n`` nodes in topological order.
        op_device: Device index of every op, shape ``(n,)``.

    Returns:
        ``(device, ops)`` per segment, ``ops`` ascending int64 of shape ``(k,)``; segments are listed in a
        topological order of their quotient graph (ties: smallest op index first).
    """
    op_device = np.asarray(op_device)
    device = op_device.tolist()  # a segment's device is its root op's: only same-device ops merge
    state = DagMerge(graph.num_nodes, graph.edge_src, graph.edge_dst)
    same = op_device[graph.edge_src] == op_device[graph.edge_dst]
    edges = list(zip(graph.edge_src[same].tolist(), graph.edge_dst[same].tolist()))
    changed = True
    while changed and edges:
        changed = False
        rejected = []
        for u, v in edges:
            a, b = state.find(u), state.find(v)
            if a == b:
                continue
            if _harmless(state, device, a, b):
                state.merge(a, b)
                changed = True
            else:
                rejected.append((u, v))
        edges = rejected
    if graph.num_nodes == 0:
        return []
    segment = canonical_assignment(graph, state.labels())  # (n,) topological, ties by smallest op
    members = np.split(np.argsort(segment, kind="stable"), np.cumsum(np.bincount(segment))[:-1])
    return [(int(op_device[ops[0]]), ops) for ops in members]


class ModelIndex:
    """How the op graph's nodes map onto an ``ov.Model``: names, data sources, consumers, outputs.

    Built once per model; :meth:`segment` and :meth:`build` use it for every placement.

    Attributes:
        model: The model (never modified).
        names: Friendly name of every op graph node, length ``n``.
        sources: Per node, per input port: the source key, or None for a constant input.
        consumers: Source key -> op graph nodes that read it.
        outputs: Source key of each model Result, in ``model.outputs`` order.
        specs: Source key -> (element type, static shape) of the tensor.
    """

    def __init__(self, model: ov.Model, graph: CompGraph) -> None:
        self.model = model
        self.names = list(graph.names)
        index = {name: i for i, name in enumerate(graph.names)}
        # pybind may hand out a new Python wrapper per access: compare nodes by instance id
        params = {p.get_instance_id(): i for i, p in enumerate(model.get_parameters())}
        nodes: dict[str, ov.Node] = {}
        for op in model.get_ordered_ops():
            if op.get_friendly_name() in index and op.get_type_name() not in ("Constant", "Parameter"):
                nodes[op.get_friendly_name()] = op
        missing = [name for name in graph.names if name not in nodes]
        if missing:
            raise BackendError(
                f"{len(missing)} op graph nodes are not ops of the model (first: {missing[0]!r}); "
                "the benchmark's op graph must come from this model"
            )

        instance = {nodes[name].get_instance_id(): i for i, name in enumerate(graph.names) if name in nodes}

        def key_of(out: ov.Output) -> Key | None:
            node_id = out.get_node().get_instance_id()
            if node_id in params:
                return param_key(params[node_id])
            i = instance.get(node_id)
            if i is not None:
                return (i, out.get_index())
            return None  # a constant, or an op computed from constants only

        self.specs: dict[Key, tuple[ov.Type, tuple[int, ...]]] = {}
        self.sources: list[list[Key | None]] = []
        self.consumers: dict[Key, list[int]] = {}
        for i, name in enumerate(self.names):
            row = []
            for inp in nodes[name].inputs():
                out = inp.get_source_output()
                key = key_of(out)
                row.append(key)
                if key is not None:
                    self.consumers.setdefault(key, []).append(i)
                    self.specs[key] = (out.get_element_type(), tuple(out.get_partial_shape().to_shape()))
            self.sources.append(row)
        self.outputs: list[Key] = []
        for result in model.get_results():
            out = result.input_value(0)
            key = key_of(out)
            if key is None or key[0] < 0:
                raise BackendError(
                    f"model output {result.get_friendly_name()!r} comes straight from a constant or an "
                    "input; the measured backend only runs models whose outputs are computed by ops"
                )
            self.outputs.append(key)
            self.specs[key] = (out.get_element_type(), tuple(out.get_partial_shape().to_shape()))
        self._model_outputs = set(self.outputs)

    def segment(self, device: int, ops: np.ndarray) -> Segment:
        """The :class:`Segment` of ``ops`` (ascending op indices) on ``device``."""
        members = set(ops.tolist())
        inputs: dict[Key, None] = {}
        outputs: dict[Key, None] = {}
        for i in ops.tolist():
            for key in self.sources[i]:
                if key is not None and key[0] not in members:
                    inputs[key] = None
        for key, readers in self.consumers.items():
            if key[0] in members and any(r not in members for r in readers):
                outputs[key] = None
        for key in self.outputs:
            if key[0] in members:
                outputs[key] = None
        return Segment(device, tuple(ops.tolist()), tuple(sorted(inputs)), tuple(sorted(outputs)))

    def build(self, segment: Segment) -> ov.Model:
        """The segment as a standalone model: Parameters for its inputs, Results for its outputs.

        The model is cloned and the segment's ops rewired to new Parameters, so the original is untouched;
        constants come along because the new model is everything the new Results depend on.
        """
        return self.build_many([segment])[0]

    def build_many(self, segments: list[Segment]) -> list[ov.Model]:
        """:meth:`build` for segments with disjoint op sets (those of one placement), from one clone.

        Each segment rewires only its own ops' inputs from outside it, so the models built from one clone
        are the same as those built from a clone each: what a segment's Results depend on is its ops, its
        new Parameters and the constants its ops read (constants read by several segments are shared by
        their models, not copied). Cloning BERT and indexing the clone's ops costs tens of milliseconds,
        once per call instead of once per segment.

        Raises:
            BackendError: If two segments share an op.
        """
        seen: set[int] = set()
        for segment in segments:
            if not seen.isdisjoint(segment.ops):
                raise BackendError("build_many needs segments with disjoint op sets (one placement's)")
            seen.update(segment.ops)
        if not segments:
            return []
        clone = self.model.clone()
        nodes = {
            op.get_friendly_name(): op
            for op in clone.get_ordered_ops()
            if op.get_type_name() not in ("Constant", "Parameter")
        }
        return [self._rewire(segment, nodes) for segment in segments]

    def _rewire(self, segment: Segment, nodes: dict[str, ov.Node]) -> ov.Model:
        """The model of ``segment`` from the cloned ``nodes`` (by friendly name): its ops' inputs from
        outside it rewired to new Parameters, Results on its outputs."""
        new_params: dict[Key, ov.Node] = {}
        for key in segment.inputs:
            etype, shape = self.specs[key]
            p = opset.parameter(shape, etype, name=f"in_{key[0]}_{key[1]}")
            p.output(0).get_tensor().set_names({f"in_{key[0]}_{key[1]}"})
            new_params[key] = p
        members = set(segment.ops)
        for i in segment.ops:
            node = nodes[self.names[i]]
            for port, key in enumerate(self.sources[i]):
                if key is not None and key[0] not in members:
                    node.input(port).replace_source_output(new_params[key].output(0))
        results = []
        for op, port in segment.outputs:
            r = opset.result(nodes[self.names[op]].output(port))
            r.set_friendly_name(f"out_{op}_{port}")
            results.append(r)
        return ov.Model(results, [new_params[k] for k in segment.inputs], f"segment_d{segment.device}")
