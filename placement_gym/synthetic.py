"""Synthetic training data: random DAGs with the zoo's op costs, platforms perturbed around the built-in ones.

Pretraining a placement policy on three models teaches it three graphs. GDP (Zhou et al., "GDP: Generalized
Device Placement for Dataflow Graphs", 2019) and Placeto (Addanki et al., NeurIPS 2019) pretrain on many
graphs instead; this module makes them:

* :func:`op_cost_stats` collects the groups of some zoo models' coarse graphs (op type, FLOPs, output /
  weight bytes, output rank): the cost statistics a synthetic graph draws from.
* :func:`random_dag` builds a random ``"layered"`` (layers of parallel ops, edges to the next layer and
  a few skips) or ``"series_parallel"`` (two-terminal series-parallel: chains and fork-join branches) DAG
  with one input and one output whose nodes are groups drawn from one model's statistics, each graph
  with its own cost scale. :func:`random_benchmark` wraps it in a
  :class:`~placement_gym.benchmarks.Benchmark` (each node its own executed layer) that
  ``PlacementProblem.make`` and the env take like a zoo model, for the simulated backend.
* :func:`perturb_platform` scales a platform's device speeds, efficiencies, overheads, memories and link
  bandwidths / latencies by random factors, optionally keeping a random subset of its devices (the host
  always stays; :func:`random_devices`, :func:`restrict_platform`), so a policy sees many device counts
  and speed ratios.

Everything is seeded by the ``numpy.random.Generator`` passed in. Use the statistics of training models
only: the held-out families (:data:`placement_gym.HELD_OUT_MODELS`) must never feed a training graph.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> stats = op_cost_stats(["resnet50"])
    >>> bench = random_benchmark(stats, rng, kind="series_parallel", num_nodes=40)
    >>> bench.ops.num_nodes
    40
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from placement_gym.benchmarks import Benchmark, load_benchmark
from placement_gym.errors import ConfigError, UnknownNameError
from placement_gym.graph import CompGraph
from placement_gym.platforms import Link, Platform

KINDS = ("layered", "series_parallel")
#: Range of the per-graph factor on every node's FLOPs and bytes.
COST_SCALE = (0.5, 2.0)
#: Range of each platform perturbation factor (log-uniform), and of the link ones.
SPEED_SCALE = (0.5, 2.0)


@dataclass(frozen=True)
class OpCostStats:
    """The groups of some models' coarse graphs, per model, to draw synthetic nodes from.

    Attributes:
        models: Model names, one per row block.
        op_types: Per model, the op type of each group (its heaviest op).
        ranks: Per model, the rank of each group's output, shape ``(G_m,)``.
        costs: Per model, ``(flops, out_bytes, param_bytes)`` of each group, shape ``(G_m, 3)``, float64.
    """

    models: tuple[str, ...]
    op_types: tuple[tuple[str, ...], ...]
    ranks: tuple[np.ndarray, ...]
    costs: tuple[np.ndarray, ...]


def op_cost_stats(models: Sequence[str], coarsening: str = "fused") -> OpCostStats:
    """Collect the groups of ``models`` (zoo names) coarsened at ``coarsening``.

    Raises:
        ConfigError: If ``models`` is empty.
        UnknownNameError: For a name that is not a zoo model.
    """
    if not models:
        raise ConfigError("op_cost_stats needs at least one model name, e.g. ['bert', 'resnet50']")
    op_types, ranks, costs = [], [], []
    for name in models:
        q = load_benchmark(name).coarsen(coarsening).graph
        op_types.append(tuple(q.op_types))
        ranks.append(np.array([len(s) for s in q.out_shapes], dtype=np.int64))
        costs.append(
            np.stack([q.nodes["flops"], q.nodes["out_bytes"], q.nodes["param_bytes"]], axis=1).astype(float)
        )
    return OpCostStats(tuple(models), tuple(op_types), tuple(ranks), tuple(costs))


def _layered_edges(num_nodes: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Layers of 1-6 nodes between a single input and a single output node."""
    widths = [1]
    while sum(widths) < num_nodes - 1:
        widths.append(int(min(rng.integers(1, 7), num_nodes - 1 - sum(widths))))
    widths.append(1)
    starts = np.cumsum([0, *widths])
    layers = [list(range(starts[i], starts[i + 1])) for i in range(len(widths))]
    edges: set[tuple[int, int]] = set()
    for prev, layer in zip(layers, layers[1:], strict=False):
        for v in layer:  # every node has a predecessor in the previous layer
            for u in rng.choice(prev, size=min(len(prev), int(rng.integers(1, 3))), replace=False):
                edges.add((int(u), v))
        for u in prev:  # and every node a successor in the next one
            if not any(s == u for s, _ in edges):
                edges.add((u, int(rng.choice(layer))))
    for li in range(2, len(layers)):  # a few skip connections (residuals)
        for v in layers[li]:
            if rng.random() < 0.15:
                edges.add((int(rng.choice(layers[int(rng.integers(0, li - 1))])), v))
    return sorted(edges)


def _series_parallel_edges(
    num_nodes: int, rng: np.random.Generator, p_series: float = 0.6
) -> list[tuple[int, int]]:
    """A two-terminal series-parallel DAG grown from ``0 -> 1`` by series and parallel node insertions."""
    edges = [(0, 1)]
    for w in range(2, num_nodes):
        i = int(rng.integers(len(edges)))
        u, v = edges[i]
        if rng.random() < p_series:  # series: u -> w -> v replaces u -> v
            edges[i] = (u, w)
            edges.append((w, v))
        else:  # parallel: a new branch u -> w -> v next to u -> v
            edges.extend([(u, w), (w, v)])
    return edges


def random_dag(
    stats: OpCostStats,
    rng: np.random.Generator,
    *,
    kind: str = "layered",
    num_nodes: int | None = None,
    name: str | None = None,
) -> CompGraph:
    """A random connected DAG with one input and one output whose nodes are groups drawn from ``stats``.

    One model of ``stats`` is chosen per graph and its groups are drawn with replacement; every node's
    FLOPs and bytes are multiplied by one factor per graph, log-uniform in :data:`COST_SCALE`. An edge
    carries its source's output bytes; the input node reads the graph input (its own output bytes), the
    output node writes the graph output.

    Args:
        stats: Cost statistics (:func:`op_cost_stats`).
        rng: Source of all randomness.
        kind: ``"layered"`` or ``"series_parallel"`` (:data:`KINDS`).
        num_nodes: Node count (>= 2); ``None``: uniform in 30..220, the zoo's range of group counts.
        name: Graph name (default ``synthetic-<kind>``).

    Raises:
        UnknownNameError: For an unknown ``kind``.
        ConfigError: If ``num_nodes < 2``.
    """
    if kind not in KINDS:
        raise UnknownNameError("synthetic graph kind", kind, KINDS)
    n = int(rng.integers(30, 221)) if num_nodes is None else int(num_nodes)
    if n < 2:
        raise ConfigError(f"a synthetic graph needs num_nodes >= 2 (an input and an output), got {n}")
    edges = _layered_edges(n, rng) if kind == "layered" else _series_parallel_edges(n, rng)
    m = int(rng.integers(len(stats.models)))
    rows = rng.integers(len(stats.op_types[m]), size=n)
    scale = float(np.exp(rng.uniform(*np.log(COST_SCALE))))
    flops, out_bytes, param_bytes = (stats.costs[m][rows] * scale).T
    out_bytes = np.maximum(np.rint(out_bytes), 4).astype(np.int64)
    sinks = np.setdiff1d(np.arange(n), [u for u, _ in edges])
    sources = np.setdiff1d(np.arange(n), [v for _, v in edges])
    nodes = {
        "out_elems": out_bytes // 4,
        "out_bytes": out_bytes,
        "param_bytes": np.rint(param_bytes).astype(np.int64),
        "input_bytes": np.where(np.isin(np.arange(n), sources), out_bytes, 0),
        "result_bytes": np.where(np.isin(np.arange(n), sinks), out_bytes, 0),
        "flops": flops,
    }
    label = name or f"synthetic-{kind}"
    return CompGraph.from_unordered(
        names=[f"{label}/n{i}" for i in range(n)],
        op_types=[stats.op_types[m][r] for r in rows],
        out_shapes=[(1,) * int(stats.ranks[m][r]) for r in rows],
        nodes=nodes,
        edges=[(u, v, int(out_bytes[u])) for u, v in edges],
        meta={
            "name": label,
            "version": 0,
            "synthetic": kind,
            "stats_model": stats.models[m],
            "cost_scale": scale,
        },
    )


def random_benchmark(stats: OpCostStats, rng: np.random.Generator, **kwargs) -> Benchmark:
    """:func:`random_dag` as a benchmark whose every node is one executed layer (simulated backend only:
    the graph has no OpenVINO model behind it)."""
    graph = random_dag(stats, rng, **kwargs)
    name = graph.meta["name"]
    return Benchmark(name, 0, graph, [[n] for n in graph.names], Path(f"<synthetic:{name}>"))


def _factor(rng: np.random.Generator, low: float = SPEED_SCALE[0], high: float = SPEED_SCALE[1]) -> float:
    return float(np.exp(rng.uniform(np.log(low), np.log(high))))


def restrict_platform(platform: Platform, devices: Sequence[int]) -> Platform:
    """``platform`` with only the given devices (indices, the host among them) and their links.

    Raises:
        ConfigError: If ``devices`` is empty, repeats an index, leaves out the host or names no device.
    """
    keep = sorted(int(i) for i in devices)
    if not keep or len(set(keep)) != len(keep) or not all(0 <= i < platform.num_devices for i in keep):
        raise ConfigError(
            f"devices {list(devices)} must be distinct indices into the {platform.num_devices} devices of "
            f"{platform.name!r}"
        )
    if platform.host not in keep:
        raise ConfigError(f"devices {keep} leave out the host (device {platform.host}) of {platform.name!r}")
    return Platform(
        name=platform.name,
        description=platform.description,
        devices=tuple(platform.devices[i] for i in keep),
        links={
            (a, b): platform.links[(i, j)] for a, i in enumerate(keep) for b, j in enumerate(keep) if i != j
        },
        host=keep.index(platform.host),
        sources=platform.sources,
    )


def random_devices(platform: Platform, rng: np.random.Generator) -> list[int]:
    """A random subset of at least two of ``platform``'s devices, the host always in it (all of them for
    a platform of two or fewer)."""
    if platform.num_devices <= 2:
        return list(range(platform.num_devices))
    others = [i for i in range(platform.num_devices) if i != platform.host]
    count = int(rng.integers(1, len(others) + 1))
    return sorted([platform.host, *(int(i) for i in rng.choice(others, size=count, replace=False))])


def perturb_platform(platform: Platform, rng: np.random.Generator, *, subset: bool = True) -> Platform:
    """A random platform around ``platform``: every device's peak FLOP/s, memory bandwidth, memory,
    launch and invoke overheads, and every link's bandwidth and latency, multiplied by independent
    log-uniform factors in :data:`SPEED_SCALE`; each op efficiency by such a factor, kept at most 1 by
    drawing its factor in ``[0.5, min(2, 1 / efficiency)]``.

    Args:
        platform: A built-in or user platform (its memory may be relative: fractions are scaled too).
        rng: Source of all randomness.
        subset: First keep a random subset of its devices (:func:`random_devices`).

    Returns:
        A new platform named ``<name>~perturbed``; the input is unchanged.
    """
    if subset:
        platform = restrict_platform(platform, random_devices(platform, rng))
    devices = []
    for d in platform.devices:
        devices.append(
            dataclasses.replace(
                d,
                peak_flops={k: v * _factor(rng) for k, v in d.peak_flops.items()},
                mem_bandwidth=d.mem_bandwidth * _factor(rng),
                launch_overhead=d.launch_overhead * _factor(rng),
                invoke_overhead=d.invoke_overhead * _factor(rng),
                memory_bytes=None if d.memory_bytes is None else int(d.memory_bytes * _factor(rng)),
                memory_fraction=None if d.memory_fraction is None else d.memory_fraction * _factor(rng),
                op_efficiency={
                    k: v * _factor(rng, high=min(2.0, 1.0 / v)) for k, v in d.op_efficiency.items()
                },
            )
        )
    links, pair_factors = {}, {}
    for (a, b), link in sorted(platform.links.items()):
        # one draw per device pair, applied to both directions' own figures
        lat, bw, blk = pair_factors.setdefault(frozenset((a, b)), (_factor(rng), _factor(rng), _factor(rng)))
        blocked = None if link.blocked_bandwidth is None else link.blocked_bandwidth * blk
        links[(a, b)] = Link(link.latency * lat, link.bandwidth * bw, blocked)
    return Platform(
        name=f"{platform.name}~perturbed",
        description=f"random perturbation of {platform.name} (placement_gym.synthetic.perturb_platform)",
        devices=tuple(devices),
        links=links,
        host=platform.host,
        sources=platform.sources,
    )
