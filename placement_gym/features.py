"""Static observation arrays of a coarse graph: node features, edges and their features, masks.

Everything here depends only on the graph, so an env computes it once and reuses it every step.
Features are scaled to roughly [0, 1] with fixed constants (not per-graph statistics), so the same
feature means the same thing on every graph and a policy can move between graphs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from placement_gym.coarsening import CoarseGraph

#: Op-type categories; a group's feature is the fraction of its ops in each (last: everything else).
OP_CATEGORIES: tuple[tuple[str, ...], ...] = (
    ("Convolution", "ConvolutionBackpropData"),
    ("GroupConvolution",),
    ("MatMul", "FullyConnected"),
    ("Add",),
    ("Multiply",),
    ("Subtract", "Divide"),
    ("Relu", "Clamp", "PRelu"),
    ("Gelu", "Erf", "Tanh", "Sigmoid", "Swish", "HSwish", "Exp"),
    ("Softmax", "SoftMax", "LogSoftmax"),
    ("MVN", "NormalizeL2", "BatchNormInference"),
    ("MaxPool", "AvgPool", "AdaptiveAvgPool", "AdaptiveMaxPool"),
    ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2"),
    ("Concat", "Split", "VariadicSplit"),
    ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Broadcast", "Tile"),
    ("Gather", "GatherND", "ScatterUpdate", "ScatterNDUpdate", "StridedSlice", "Slice"),
    ("Convert",),
    ("Power", "Sqrt"),
    ("ShapeOf", "Range", "Select", "Equal", "Greater", "Less", "Not", "LogicalNot"),
)
_CATEGORY = {op: i for i, ops in enumerate(OP_CATEGORIES) for op in ops}
NUM_CATEGORIES = len(OP_CATEGORIES) + 1

#: Names of the columns of ``node_features`` (op-type fractions come last).
NODE_FEATURES: tuple[str, ...] = (
    (
        "log_flops",
        "log_out_bytes",
        "log_param_bytes",
        "log_input_bytes",
        "log_result_bytes",
        "log_members",
        "topo_position",
        "log_in_degree",
        "log_out_degree",
    )
    + tuple(f"frac_{ops[0]}" for ops in OP_CATEGORIES)
    + ("frac_other",)
)
NUM_NODE_FEATURES = len(NODE_FEATURES)
EDGE_FEATURES: tuple[str, ...] = ("log_bytes",)

_LOG_FLOPS_SCALE = np.log1p(1e12)  # a 1 TFLOP group scores 1.0
_LOG_BYTES_SCALE = np.log1p(2.0**32)  # a 4 GiB tensor scores 1.0


@dataclass(frozen=True)
class StaticFeatures:
    """Padded static arrays of one coarse graph.

    Attributes:
        node_features: ``(N, NUM_NODE_FEATURES)`` float32, zero rows for padding.
        node_mask: ``(N,)`` float32, 1 for real groups.
        edge_index: ``(2, E)`` int64, ``[source; target]`` group indices; padding edges are ``0 -> 0``.
        edge_features: ``(E, 1)`` float32, zero rows for padding.
        edge_mask: ``(E,)`` float32, 1 for real edges.
    """

    node_features: np.ndarray
    node_mask: np.ndarray
    edge_index: np.ndarray
    edge_features: np.ndarray
    edge_mask: np.ndarray


def op_type_fractions(coarse: CoarseGraph) -> np.ndarray:
    """Fraction of each group's ops in each op-type category, shape ``(G, NUM_CATEGORIES)``."""
    cats = np.array([_CATEGORY.get(t, NUM_CATEGORIES - 1) for t in coarse.ops.op_types], dtype=np.int64)
    counts = np.zeros((coarse.num_groups, NUM_CATEGORIES), dtype=np.float64)
    np.add.at(counts, (coarse.assignment, cats), 1.0)
    return counts / counts.sum(axis=1, keepdims=True)


def static_features(coarse: CoarseGraph, max_nodes: int, max_edges: int) -> StaticFeatures:
    """Compute the padded static arrays of ``coarse`` (``max_nodes >= G``, ``max_edges >= edges``)."""
    q = coarse.graph
    g, m = q.num_nodes, q.num_edges
    members = np.bincount(coarse.assignment, minlength=g)
    in_deg = np.bincount(q.edge_dst, minlength=g)
    out_deg = np.bincount(q.edge_src, minlength=g)
    cols = [
        np.log1p(q.nodes["flops"]) / _LOG_FLOPS_SCALE,
        np.log1p(q.nodes["out_bytes"]) / _LOG_BYTES_SCALE,
        np.log1p(q.nodes["param_bytes"]) / _LOG_BYTES_SCALE,
        np.log1p(q.nodes["input_bytes"]) / _LOG_BYTES_SCALE,
        np.log1p(q.nodes["result_bytes"]) / _LOG_BYTES_SCALE,
        np.log1p(members) / np.log1p(1e4),
        np.arange(g) / max(g - 1, 1),
        np.log1p(in_deg) / np.log1p(64),
        np.log1p(out_deg) / np.log1p(64),
    ]
    node = np.zeros((max_nodes, NUM_NODE_FEATURES), dtype=np.float32)  # (N, F)
    node[:g] = np.column_stack([*cols, op_type_fractions(coarse)])
    node_mask = np.zeros(max_nodes, dtype=np.float32)  # (N,)
    node_mask[:g] = 1.0
    edge_index = np.zeros((2, max_edges), dtype=np.int64)  # (2, E)
    edge_index[0, :m], edge_index[1, :m] = q.edge_src, q.edge_dst
    edge_features = np.zeros((max_edges, len(EDGE_FEATURES)), dtype=np.float32)  # (E, 1)
    edge_features[:m, 0] = np.log1p(q.edge_bytes) / _LOG_BYTES_SCALE
    edge_mask = np.zeros(max_edges, dtype=np.float32)  # (E,)
    edge_mask[:m] = 1.0
    for arr in (node, node_mask, edge_index, edge_features, edge_mask):
        arr.flags.writeable = False
    return StaticFeatures(node, node_mask, edge_index, edge_features, edge_mask)


def pad_features(features: StaticFeatures, max_nodes: int, max_edges: int) -> StaticFeatures:
    """``features`` padded with zeros to ``max_nodes`` nodes and ``max_edges`` edges (no copy if no padding).

    Raises:
        ValueError: If ``features`` already has more nodes or edges.
    """
    g, m = features.node_mask.shape[0], features.edge_mask.shape[0]
    if max_nodes < g or max_edges < m:
        raise ValueError(f"cannot pad {g} nodes / {m} edges to {max_nodes} / {max_edges}")
    if (max_nodes, max_edges) == (g, m):
        return features

    def pad(arr: np.ndarray, axis: int, size: int) -> np.ndarray:
        widths = [(0, 0)] * arr.ndim
        widths[axis] = (0, size - arr.shape[axis])
        out = np.pad(arr, widths)
        out.flags.writeable = False
        return out

    return StaticFeatures(
        pad(features.node_features, 0, max_nodes),
        pad(features.node_mask, 0, max_nodes),
        pad(features.edge_index, 1, max_edges),
        pad(features.edge_features, 0, max_edges),
        pad(features.edge_mask, 0, max_edges),
    )


#: Columns of ``node_device_features`` (per group and device).
NODE_DEVICE_FEATURES: tuple[str, ...] = ("log_compute_time", "relative_speed", "fits_memory")
#: Columns of ``device_features`` (per device).
DEVICE_FEATURES: tuple[str, ...] = (
    "relative_speed",
    "log_memory",
    "log_invoke_overhead",
    "is_host",
    "log_out_bandwidth",
)
_LOG_TIME_SCALE = np.log1p(1e6)  # times in microseconds: 1 s scores 1.0


def _log_time(seconds: np.ndarray) -> np.ndarray:
    """Scaled log of a time in seconds, in ``[0, 1]`` up to 1 s (``inf`` -> 1)."""
    scaled = np.log1p(np.minimum(seconds, 1.0) * 1e6) / _LOG_TIME_SCALE
    return np.where(np.isfinite(seconds), scaled, 1.0)


@dataclass(frozen=True)
class DeviceFeatures:
    """Device-aware arrays of one (graph, platform) pair, unpadded; every value lies in ``[0, 1]``.

    Attributes:
        node_device: ``(G, D, 3)`` float32 per group and device (:data:`NODE_DEVICE_FEATURES`): scaled log of
            the estimated compute time, fastest device's time / this device's (0 if it cannot run the
            group), 1 if the group's weights and outputs fit in the device's memory.
        edge_link: ``(E, D * D)`` float32: scaled log of the time to send the edge's bytes over link
            ``i -> j`` (entry ``i * D + j``; 0 on the diagonal).
        device: ``(D, 5)`` float32 per device (:data:`DEVICE_FEATURES`): fastest device's whole-graph
            compute time / this device's, scaled log memory (1 TiB -> 1), scaled log invoke overhead,
            1 for the host, scaled log mean outgoing link bandwidth (1 TB/s -> 1).
    """

    node_device: np.ndarray
    edge_link: np.ndarray
    device: np.ndarray


def device_features(cost: Any, fits: np.ndarray) -> DeviceFeatures:
    """Device-aware features from a cost model (:class:`~placement_gym.simulation.cost_model.CostModel`)
    and the ``(G, D)`` memory mask; the same definitions on every graph and platform, so that one policy
    can serve several."""
    compute = np.asarray(cost.compute, dtype=np.float64)  # (G, D)
    g, d = compute.shape
    runnable = np.isfinite(compute)
    fastest = np.where(runnable, compute, np.inf).min(axis=1, keepdims=True)  # (G, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(runnable & (compute > 0), fastest / compute, np.where(runnable, 1.0, 0.0))
    node_device = np.stack([_log_time(compute), relative, fits.astype(np.float64)], axis=-1)
    e = len(cost.edge_bytes)
    link = np.zeros((e, d, d))
    for i in range(d):
        for j in range(d):
            if i != j:
                link[:, i, j] = _log_time(np.asarray(cost.transfer_time(cost.edge_bytes, i, j), dtype=np.float64))
    total = np.where(runnable, compute, 0.0).sum(axis=0)  # (D,)
    total = np.where(runnable.all(axis=0), total, np.inf)
    best = total.min() if np.isfinite(total).any() else np.inf
    speed = np.where(np.isfinite(total) & (total > 0), best / total, 0.0)
    bandwidth = np.where(np.eye(d, dtype=bool), np.nan, np.asarray(cost.link_bandwidth, dtype=np.float64))
    mean_bw = np.nan_to_num(np.nanmean(np.minimum(bandwidth, 1e12), axis=1) if d > 1 else np.zeros(d))
    device = np.column_stack(
        [
            speed,
            np.log1p(np.asarray(cost.capacity) / 2**20) / np.log1p(2**20),
            _log_time(np.asarray(cost.invoke_overhead, dtype=np.float64)),
            np.arange(d) == cost.host,
            np.log1p(mean_bw / 1e6) / np.log1p(1e6),
        ]
    )
    out = DeviceFeatures(
        node_device.astype(np.float32), link.reshape(e, d * d).astype(np.float32), device.astype(np.float32)
    )
    for arr in (out.node_device, out.edge_link, out.device):
        np.clip(arr, 0.0, 1.0, out=arr)
        arr.flags.writeable = False
    return out
