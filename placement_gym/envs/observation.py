"""The placement-independent part of the envs' observations: padded graph arrays, device-aware arrays,
their ``Box`` spaces, and the one-hot placement.

Both :class:`~placement_gym.envs.DevicePlacementEnv` and
:class:`~placement_gym.envs.DevicePlacementImproveEnv` build their ``Dict`` observation from these, so the
keys mean the same in every mode.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from gymnasium import spaces

from placement_gym.features import NODE_DEVICE_FEATURES, pad_features
from placement_gym.limits import require_memory
from placement_gym.problem import PlacementProblem
from placement_gym.validation import padding_size

BIG = np.float32(3.0e38)  # finite Box bound of the unbounded feature columns


def padded_bytes(num_devices: int, device: bool, improve: bool = False) -> tuple[int, int]:
    """Peak bytes per padded node and per padded edge of an env's construction, reset and first step (its
    observation arrays and their temporaries), an upper estimate fitted to measured peaks
    (``tests/envs/test_padding_memory.py`` checks it within 1.5x above them): the device-aware keys add
    ``(N, D, 3)`` and ``(E, D * D)`` arrays, the improvement MDP its move arrays."""
    d = num_devices
    node = 800 + (96 if device else 24) * d + (100 if improve else 0)
    edge = 144 + (24 * d * d if device else 0)
    return node, edge


def check_padding(
    problem: PlacementProblem, max_nodes: object, max_edges: object, device: bool = True, improve: bool = False
) -> tuple[int, int]:
    """``(N, E)``: the padded node and edge counts (the graph's own when ``None``): integers at least the
    graph's, whose observations (:func:`padded_bytes` per node and per edge) fit in memory.

    Raises:
        ConfigError: If a padding size is not an integer, smaller than the graph, or too large for memory
            (see :func:`~placement_gym.validation.padding_size`).
    """
    g, edges, d = problem.num_groups, problem.coarse.graph.num_edges, problem.num_devices
    node_bytes, edge_bytes = padded_bytes(d, device, improve)
    n = g if max_nodes is None else padding_size(max_nodes, "max_nodes", g, node_bytes)
    e = edges if max_edges is None else padding_size(max_edges, "max_edges", edges, edge_bytes)
    require_memory(n * node_bytes + e * edge_bytes, f"the observations of {n} groups, {e} edges, {d} devices")
    return n, e


def static_arrays(problem: PlacementProblem, n: int, e: int, device: bool) -> dict[str, np.ndarray]:
    """The placement-independent observation arrays, padded to ``n`` nodes and ``e`` edges, read-only.

    Keys: ``node_features`` ``(N, 28)``, ``node_mask`` ``(N,)``, ``edge_index`` ``(2, E)``,
    ``edge_features`` ``(E, 1)``, ``edge_mask`` ``(E,)``; with ``device`` also ``node_device_features``
    ``(N, D, 3)``, ``edge_link_features`` ``(E, D * D)`` and ``device_features`` ``(D, 5)``.
    """
    s = pad_features(problem.features, n, e)
    out = {
        "node_features": s.node_features,
        "node_mask": s.node_mask,
        "edge_index": s.edge_index,
        "edge_features": s.edge_features,
        "edge_mask": s.edge_mask,
    }
    if device:
        f = problem.device_features
        g, d, edges = problem.num_groups, problem.num_devices, problem.coarse.graph.num_edges
        node_device = np.zeros((n, d, len(NODE_DEVICE_FEATURES)), dtype=np.float32)  # (N, D, 3)
        node_device[:g] = f.node_device
        edge_link = np.zeros((e, d * d), dtype=np.float32)  # (E, D * D)
        edge_link[:edges] = f.edge_link
        out.update(
            node_device_features=node_device, edge_link_features=edge_link, device_features=np.array(f.device)
        )
    for arr in out.values():
        arr.flags.writeable = False
    return out


def static_spaces(arrays: dict[str, np.ndarray], n: int) -> dict[str, spaces.Box]:
    """The ``Box`` of each array of :func:`static_arrays` (``n``: padded node count)."""
    bounds = {
        "node_features": (0.0, BIG),
        "edge_index": (0, max(n - 1, 0)),
        "edge_features": (0.0, BIG),
    }
    out = {}
    for key, arr in arrays.items():
        low, high = bounds.get(key, (0.0, 1.0))
        out[key] = spaces.Box(low, high, arr.shape, arr.dtype)
    return out


@lru_cache(maxsize=64)
def _one_hot_rows(d: int) -> np.ndarray:
    """``(D + 1, D)`` float32: the one-hot row of each device, then a zero row (taken for index -1)."""
    rows = np.zeros((d + 1, d), dtype=np.float32)
    rows[np.arange(d), np.arange(d)] = 1.0
    rows.flags.writeable = False
    return rows


def one_hot(placement: np.ndarray, n: int, d: int) -> np.ndarray:
    """``(N, D)`` float32 one-hot of a ``(G,)`` int64 placement (rows of unplaced groups, -1, and padding:
    zero), a new array."""
    rows = _one_hot_rows(d).take(placement, axis=0)  # (G, D); -1 takes the zero row
    if n == len(placement):
        return rows
    out = np.zeros((n, d), dtype=np.float32)  # (N, D)
    out[: len(placement)] = rows
    return out
