"""Estimates of the floating-point operations of one OpenVINO op (one inference, static shapes).

A multiply-add counts as two operations. Convolutions and matrix products are exact; other ops are
counted per element (``elementwise_cost`` per output element, reductions per input element), which is
what a roofline model needs: they are memory-bound and their time comes from bytes, not FLOPs.
"""

from __future__ import annotations

import numpy as np
import openvino as ov

# FLOPs per output element of ops that are not plain one-operation elementwise ops.
_PER_ELEMENT = {
    "Softmax": 5.0,
    "SoftMax": 5.0,
    "Gelu": 8.0,
    "Erf": 8.0,
    "Tanh": 4.0,
    "Sigmoid": 4.0,
    "Swish": 5.0,
    "HSwish": 4.0,
    "Exp": 4.0,
    "Sqrt": 2.0,
    "MVN": 8.0,
    "NormalizeL2": 4.0,
    "Power": 4.0,
}
# Ops that only move or reinterpret data.
_DATA_MOVEMENT = {
    "Reshape",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Concat",
    "Split",
    "VariadicSplit",
    "Gather",
    "StridedSlice",
    "Slice",
    "ShapeOf",
    "Broadcast",
    "Convert",
    "Tile",
    "Pad",
    "ScatterUpdate",
    "ScatterNDUpdate",
    "GatherND",
    "DepthToSpace",
    "SpaceToDepth",
}
_REDUCTIONS = {
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL2",
    "MaxPool",
    "AvgPool",
}


def _elems(shape: ov.PartialShape | ov.Shape) -> float:
    dims = list(shape.to_shape()) if isinstance(shape, ov.PartialShape) else list(shape)
    return float(np.prod(dims, dtype=np.float64)) if dims else 1.0


def estimate_flops(op: ov.Node) -> float:
    """Estimated FLOPs of ``op`` for one inference; 0 for pure data movement."""
    kind = op.get_type_name()
    out = _elems(op.output(0).get_partial_shape()) if op.get_output_size() else 0.0
    if kind in ("Convolution", "GroupConvolution", "ConvolutionBackpropData"):
        w = list(op.input(1).get_partial_shape().to_shape())
        if kind == "GroupConvolution":  # weights [G, C_out/G, C_in/G, k...]
            per_out = float(np.prod(w[2:], dtype=np.float64))
        elif kind == "Convolution":  # weights [C_out, C_in, k...]
            per_out = float(np.prod(w[1:], dtype=np.float64))
        else:  # backprop data weights [C_in, C_out, k...]: each input element scatters C_out*k values
            return 2.0 * _elems(op.input(0).get_partial_shape()) * float(np.prod(w[1:], dtype=np.float64))
        return 2.0 * out * per_out
    if kind == "MatMul":
        a = list(op.input(0).get_partial_shape().to_shape())
        attrs = op.get_attributes()
        k = a[-2] if (attrs.get("transpose_a") and len(a) > 1) else a[-1]
        return 2.0 * out * float(k)
    if kind == "ScaledDotProductAttention":
        # softmax(Q K^T * scale + mask) V with Q [..., L, E], K [..., S, E], V [..., S, Ev]: two matrix
        # products and a softmax over the L x S scores (OpenVINO fuses eager attention into this op).
        q = list(op.input(0).get_partial_shape().to_shape())
        k = list(op.input(1).get_partial_shape().to_shape())
        v = list(op.input(2).get_partial_shape().to_shape())
        scores = float(np.prod(q[:-1], dtype=np.float64)) * float(k[-2])
        return scores * (2.0 * q[-1] + 2.0 * v[-1] + _PER_ELEMENT["Softmax"])
    if kind in _REDUCTIONS:
        return _elems(op.input(0).get_partial_shape())
    if kind in _DATA_MOVEMENT:
        return 0.0
    return out * _PER_ELEMENT.get(kind, 1.0)
