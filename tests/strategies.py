"""Hypothesis strategies for random computation graphs."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from placement_gym.graph import NODE_ARRAYS, CompGraph


def make_graph(
    n: int, edges: list[tuple[int, int, int]], flops: list[float] | None = None, name: str = "g"
) -> CompGraph:
    """A CompGraph of ``n`` nodes from edges ``(src, dst, bytes)`` in any order."""
    flops = flops if flops is not None else [1.0] * n
    nodes = {k: np.zeros(n) for k in NODE_ARRAYS}
    nodes["flops"] = np.asarray(flops, dtype=float)
    nodes["out_bytes"] = np.full(n, 4)
    nodes["out_elems"] = np.full(n, 1)
    return CompGraph.from_unordered(
        [f"n{i}" for i in range(n)], ["Op"] * n, [(1,)] * n, nodes, edges, meta={"name": name}
    )


@st.composite
def random_dags(draw, max_nodes: int = 40) -> CompGraph:
    """Random DAGs: nodes in a random order, edges only from earlier to later nodes of that order."""
    n = draw(st.integers(1, max_nodes))
    perm = draw(st.permutations(range(n)))
    density = draw(st.floats(0.0, 0.5))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    edges = [
        (perm[i], perm[j], int(rng.integers(1, 1000)))
        for i in range(n)
        for j in range(i + 1, n)
        if rng.random() < density
    ]
    flops = rng.exponential(100.0, size=n).tolist()
    return make_graph(n, edges, flops)
