"""Build a :class:`~placement_gym.graph.CompGraph` from an ``openvino.Model``.

Executable ops become nodes. ``Parameter`` and ``Result`` ops are not nodes: the bytes an op reads from a
graph input or hands to a graph output become its ``input_bytes`` / ``result_bytes``. ``Constant`` ops,
and ops all of whose inputs are constant (a ``Convert`` of compressed weights, say), are folded into
their consumers as ``param_bytes``. The model must have static shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino as ov

from placement_gym.errors import ModelError
from placement_gym.flops import estimate_flops
from placement_gym.graph import NODE_ARRAYS, CompGraph

_NON_EXECUTABLE = {"Parameter", "Result", "Constant"}


def _static_shape(output: ov.Output, op: ov.Node) -> tuple[int, ...]:
    shape = output.get_partial_shape()
    if shape.is_dynamic:
        raise ModelError(
            f"op {op.get_friendly_name()!r} has dynamic output shape {shape}; reshape the model to static "
            "input shapes first (model.reshape(...) or convert_model(..., input=[...]))"
        )
    return tuple(int(d) for d in shape.to_shape())


def _tensor_bytes(output: ov.Output, op: ov.Node) -> tuple[int, int]:
    """(elements, bytes) of one output tensor."""
    shape = _static_shape(output, op)
    elems = int(np.prod(shape, dtype=np.int64)) if shape else 1
    bits = output.get_element_type().bitwidth
    return elems, (elems * bits + 7) // 8


def graph_from_ov(model: ov.Model, meta: dict[str, Any] | None = None) -> CompGraph:
    """Extract the op DAG of ``model``.

    Args:
        model: An OpenVINO model with static shapes.
        meta: Metadata stored in the graph (model name, graph version, ...).

    Returns:
        A graph with one node per executable op, node names equal to the ops' friendly names.

    Raises:
        ModelError: If the model has dynamic shapes, duplicate op names or no executable op.
    """
    ops = list(model.get_ordered_ops())
    constant: set[int] = set()  # id() of ops whose value is known before inference
    for op in ops:
        kind = op.get_type_name()
        if kind == "Constant" or (
            kind not in _NON_EXECUTABLE
            and op.get_input_size() > 0
            and all(id(i.get_source_output().get_node()) in constant for i in op.inputs())
        ):
            constant.add(id(op))

    index: dict[int, int] = {}
    names: list[str] = []
    op_types: list[str] = []
    out_shapes: list[tuple[int, ...]] = []
    feats = {k: [] for k in NODE_ARRAYS}
    for op in ops:
        if op.get_type_name() in _NON_EXECUTABLE or id(op) in constant:
            continue
        index[id(op)] = len(names)
        names.append(op.get_friendly_name())
        op_types.append(op.get_type_name())
        out_shapes.append(_static_shape(op.output(0), op) if op.get_output_size() else ())
        sizes = [_tensor_bytes(o, op) for o in op.outputs()]
        feats["out_elems"].append(sum(e for e, _ in sizes))
        feats["out_bytes"].append(sum(b for _, b in sizes))
        feats["flops"].append(estimate_flops(op))
        feats["param_bytes"].append(0)
        feats["input_bytes"].append(0)
        feats["result_bytes"].append(0)
    if not names:
        raise ModelError(
            "the model has no executable ops (only inputs, constants and outputs): there is nothing to place"
        )
    if len(set(names)) != len(names):
        raise ModelError("the model has duplicate op friendly names; they must be unique to place ops")

    edges: dict[tuple[int, int], set[int]] = {}  # (src, dst) -> output ports carried
    for op in ops:
        dst = index.get(id(op))
        kind = op.get_type_name()
        for inp in op.inputs():
            out = inp.get_source_output()
            src_op = out.get_node()
            src = index.get(id(src_op))
            if dst is not None:
                if id(src_op) in constant:
                    feats["param_bytes"][dst] += _tensor_bytes(out, src_op)[1]
                elif src_op.get_type_name() == "Parameter":
                    feats["input_bytes"][dst] += _tensor_bytes(out, src_op)[1]
                elif src is not None:
                    edges.setdefault((src, dst), set()).add(out.get_index())
            elif kind == "Result" and src is not None:
                feats["result_bytes"][src] += _tensor_bytes(out, src_op)[1]

    port_bytes = {}
    for op in ops:
        i = index.get(id(op))
        if i is not None:
            port_bytes[i] = [_tensor_bytes(o, op)[1] for o in op.outputs()]
    edge_list = [(s, d, sum(port_bytes[s][p] for p in ports)) for (s, d), ports in edges.items()]
    return CompGraph.from_unordered(
        names,
        op_types,
        out_shapes,
        {k: np.asarray(v) for k, v in feats.items()},
        edge_list,
        meta=meta,
    )
