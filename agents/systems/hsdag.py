"""HSDAG: hierarchical structure-aware device assignment (Duan et al., NeurIPS 2024).

Paper: S. Duan, H. Ping, N. Kanakaris, X. Xiao, P. Kyriakis, N. K. Ahmed, P. Zhang, G. Ma, M. Capota,
S. Nazarian, T. L. Willke, P. Bogdan. "A Structure-Aware Framework for Learning Device Placements on
Computation Graphs." NeurIPS 2024. Released code: github.com/Esthesia/HSDAG (``main.py``, ``model.py``,
``layer.py``, ``config.py``), which this module follows where paper and code differ.

As in the released code, by default:

1. graph: the problem's groups (``coarsen="hsdag"`` first merges every group with exactly one
   predecessor into its predecessor's group, HSDAG's co-location rule, and places those merged groups);
2. features: each group's op-type mix (the mean one-hot op type of its ops, here over the project's
   op-type categories) and the group's index;
3. node representations: a two-layer input MLP (each layer Linear, LayerNorm, ReLU, dropout 0.2, active
   while sampling), then two GCN layers over the undirected graph inside a residual LayerNorm
   (``LayerNorm(h + GCN(GCN(h)))``, the released ``GNN``), width 128;
4. graph-parsing pooling (GPN, Song et al. ICLR 2024): an MLP (with LayerNorm) scores every edge from the
   product of its endpoints' embeddings; every node keeps its dominant (highest-scoring) edge and the
   connected components of the dominant edges are the clusters, so their number is not fixed; cluster
   embeddings are a DeepSets sum (each side ``LayerNorm(h + Linear(h))``) of the member embeddings of a
   second, one-layer GCN, multiplied by the mean score of the cluster's inner edges and by their count
   (which is how the scores get gradients), then an output MLP (ReLU at the end, no normalisation); the
   LayerNorms keep the embeddings bounded while the state update below adds to the features;
5. placer: an MLP (width 128) gives each cluster a device distribution; all members take its device;
6. an episode is ``K = 20`` placements sampled one after another; between two steps each node's features
   are updated by adding its cluster's embedding (the state update); each episode starts from the
   initial features;
7. REINFORCE without a baseline: all the episode's log-probabilities are weighted by its discounted
   return (discount 0.95) of the rewards ``1 / runtime`` (seconds), where a single-device placement and
   an infeasible one count as failures with runtime ``1e10``; Adam, learning rate 1e-3, no gradient
   clipping; 25 episodes = the paper's 500 evaluations.

Deviations from the released code (the rest of the list above is as released):

* The graph is the problem's coarse graph (fused layers by default; ``coarsening="ops"`` in the problem
  gives HSDAG's op-level input), built by this project from the OpenVINO IR, and ``coarsen="hsdag"`` is
  off by default so that HSDAG places the same groups as the other methods. The op-type one-hot is over
  the project's 19 op-type categories, not one column per IR op type.
* Parsing runs for ``levels`` levels (default 1); the released GPN repeats it as long as it contracts.
  The inner edges of a cluster are all edges between two of its members (the released parser counts
  those it visited while growing the cluster); a graph contracted to a single node does not keep its
  input features (the released GPN's ``mask1``/``mask2``, which only matters after several levels).
* Single-device placements count as failures on any platform (the released code, written for CPU +
  GPU, tests all-CPU and all-GPU).
* Devices that cannot hold a group's weights and outputs are masked out (``problem.device_mask``); the
  released code samples every device.
* The loss is the mean over the episode's samples of ``-return * log_prob`` instead of the sum (a constant
  factor ``K``, which Adam's step normalisation removes).
* On a deterministic backend a placement sampled again is looked up rather than re-measured (the budget
  counts distinct placements, see :func:`agents.systems.common.reinforce`).
* ``reward="env"`` (the problem's speedup reward, infeasible -1) is an option, not the default.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from torch import nn
from torch_geometric.nn import GCNConv

from agents.base import BudgetTracker, PlacementMethod
from agents.systems.common import (
    DEFAULT_BUDGET,
    DiscountedReturn,
    SampleBatch,
    budget_of,
    make_generator,
    reinforce,
    sample_categorical,
    seeded_module,
    torch_threads,
    training_extras,
)
from placement_gym.errors import UnknownNameError
from placement_gym.features import NUM_CATEGORIES, OP_CATEGORIES
from placement_gym.problem import PlacementProblem

#: Runtime (seconds) the released code charges a single-device or failing placement.
FAILURE_RUNTIME = 1e10


def hsdag_coarsening(num_nodes: int, edge_src: np.ndarray, edge_dst: np.ndarray) -> np.ndarray:
    """HSDAG's co-location rule: every node with exactly one predecessor joins its predecessor's group.

    Args:
        num_nodes: ``n``; nodes are numbered in topological order.
        edge_src, edge_dst: ``(m,)`` edges (parallel edges count once).

    Returns:
        ``(n,)`` int64 group of each node, groups numbered ``0..`` in order of first member.
    """
    pairs = (
        np.unique(np.stack([edge_src, edge_dst], axis=1), axis=0) if len(edge_src) else np.zeros((0, 2), int)
    )
    indeg = np.bincount(pairs[:, 1], minlength=num_nodes)
    pred = np.full(num_nodes, -1, dtype=np.int64)
    single = indeg[pairs[:, 1]] == 1
    pred[pairs[single, 1]] = pairs[single, 0]
    label = np.empty(num_nodes, dtype=np.int64)
    count = 0
    for v in range(num_nodes):  # topological order: a predecessor is labelled before its successors
        if pred[v] >= 0:
            label[v] = label[pred[v]]
        else:
            label[v], count = count, count + 1
    return label


def _op_type_mix(problem: PlacementProblem, group_of_op: np.ndarray, num_groups: int) -> np.ndarray:
    """``(n, NUM_CATEGORIES)`` mean one-hot op-type category of each group's ops."""
    category = {op: i for i, ops in enumerate(OP_CATEGORIES) for op in ops}
    cats = np.array(
        [category.get(t, NUM_CATEGORIES - 1) for t in problem.coarse.ops.op_types], dtype=np.int64
    )
    counts = np.zeros((num_groups, NUM_CATEGORIES))
    np.add.at(counts, (group_of_op, cats), 1.0)
    return counts / counts.sum(axis=1, keepdims=True)


class HSDAGGraph:
    """The graph HSDAG places: nodes, undirected edges, features and the map back to the problem's groups.

    Args:
        problem: The placement problem.
        coarsen: Apply HSDAG's co-location rule to the problem's groups first.
    """

    def __init__(self, problem: PlacementProblem, coarsen: bool) -> None:
        q = problem.coarse.graph
        g = problem.num_groups
        self.group = hsdag_coarsening(g, q.edge_src, q.edge_dst) if coarsen else np.arange(g, dtype=np.int64)
        n = int(self.group.max()) + 1
        src, dst = self.group[q.edge_src], self.group[q.edge_dst]
        cross = src != dst
        pairs = np.unique(np.stack([src[cross], dst[cross]], axis=1), axis=0)
        self.num_nodes = n
        self.edge_index = torch.as_tensor(pairs.T.copy(), dtype=torch.long).reshape(2, -1)  # (2, m) directed
        self.undirected = torch.cat([self.edge_index, self.edge_index.flip(0)], dim=1)  # (2, 2m)
        mix = _op_type_mix(problem, self.group[np.asarray(problem.coarse.assignment)], n)
        index = np.arange(n, dtype=np.float64)[:, None]  # the released code appends the raw group index
        self.x = torch.as_tensor(np.hstack([mix, index]), dtype=torch.float32)  # (n, NUM_CATEGORIES + 1)
        allowed = np.ones((n, problem.num_devices), dtype=bool)
        np.logical_and.at(allowed, self.group, np.asarray(problem.device_mask))
        allowed[~allowed.any(1)] = True
        self.device_mask = torch.as_tensor(allowed)  # (n, D)


def _mlp(sizes: list[int], dropout: float, act_final: bool = True, norm: bool = False) -> nn.Sequential:
    """The released ``MLP``: Linear layers, each but (unless ``act_final``) the last followed by ReLU and
    dropout; ``norm`` inserts a LayerNorm before each of those ReLUs (the released ``norm_mode='insert'``)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or act_final:
            layers += [nn.LayerNorm(b)] if norm else []
            layers += [nn.ReLU(), nn.Dropout(dropout)]
    return nn.Sequential(*layers)


class ResidualNorm(nn.Module):
    """``LayerNorm(x + f(x))``: the released ``MLP(norm_mode='post')`` and ``GNN`` wrap their layers so.

    Args:
        layers: ``f``, a sequence of modules; GCN layers get the edges, the others only the features.
        width: Feature size (of ``x`` and ``f(x)``).
    """

    def __init__(self, layers: list[nn.Module], width: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor, edges: torch.Tensor | None = None) -> torch.Tensor:
        h = x
        for layer in self.layers:
            h = layer(h, edges) if isinstance(layer, GCNConv) else layer(h)
        return self.norm(x + h)


def _gnn(num_layers: int, hidden: int, dropout: float) -> ResidualNorm:
    """The released ``GNN``: ``num_layers`` x (GCN, ReLU, dropout), then ``LayerNorm(x + .)``."""
    layers: list[nn.Module] = []
    for _ in range(num_layers):
        layers += [GCNConv(hidden, hidden), nn.ReLU(), nn.Dropout(dropout)]
    return ResidualNorm(layers, hidden)


def dominant_edge_clusters(
    num_nodes: int, undirected: torch.Tensor, score: torch.Tensor
) -> tuple[int, np.ndarray]:
    """GPN's parsing: each node keeps its highest-scoring incident edge; clusters are the components.

    Args:
        num_nodes: ``n``.
        undirected: ``(2, 2m)`` both directions of every edge.
        score: ``(2m,)`` score of each directed copy (equal for the two copies of an edge).

    Returns:
        ``(count, label (n,) int64)``.
    """
    src = undirected[0].numpy()
    keep = np.zeros(len(src), dtype=bool)
    if len(src):
        order = np.lexsort((-score.detach().numpy(), src))  # by node, best score first
        first = np.ones(len(order), dtype=bool)
        first[1:] = src[order][1:] != src[order][:-1]
        keep[order[first]] = True
    s, d = undirected[:, keep].numpy()
    adj = coo_matrix((np.ones(len(s)), (s, d)), shape=(num_nodes, num_nodes))
    count, labels = connected_components(adj, directed=False)
    return int(count), labels.astype(np.int64)


class HSDAGPolicy(nn.Module):
    """Input MLP + GCN encoder, graph-parsing pooling, cluster placer (the released code's ``GPN`` + ``PPO``).

    Args:
        in_dim: Node feature size ``F`` (also the size of cluster embeddings, added to the state).
        num_devices: ``D``.
        hidden: Width (the released code: 128).
        dropout: Dropout of the network (0.2).
        levels: Parsing levels.
    """

    def __init__(
        self, in_dim: int, num_devices: int, hidden: int = 128, dropout: float = 0.2, levels: int = 1
    ):
        super().__init__()
        self.levels = levels
        self.input_trans = _mlp([in_dim, hidden, hidden], dropout, norm=True)
        self.gnn1 = _gnn(2, hidden, dropout)  # node embeddings scored by the edge net
        self.gnn2 = _gnn(1, hidden, dropout)  # node embeddings pooled into clusters
        self.edge_net = _mlp([hidden, hidden, 1], dropout, act_final=False, norm=True)
        self.deepsets_pre = ResidualNorm([nn.Linear(hidden, hidden)], hidden)
        self.deepsets_post = ResidualNorm([nn.Linear(hidden, hidden)], hidden)
        self.output_trans = _mlp([hidden, hidden, in_dim], dropout)
        self.classifier = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, num_devices))

    def forward(self, x: torch.Tensor, undirected: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
        """Cluster embeddings ``(C, F)`` and each node's cluster ``(n,)``."""
        n = x.shape[0]
        h = self.input_trans(x)
        labels = np.arange(n, dtype=np.int64)
        edges = undirected
        for _ in range(self.levels):
            h1 = self.gnn1(h, edges)
            score = torch.sigmoid(self.edge_net(h1[edges[0]] * h1[edges[1]])).squeeze(-1)  # (2m,)
            count, lab = dominant_edge_clusters(h.shape[0], edges, score)
            lab_t = torch.as_tensor(lab)
            inside = lab_t[edges[0]] == lab_t[edges[1]]
            gate_sum = torch.zeros(count).index_add(0, lab_t[edges[0][inside]], score[inside])
            links = torch.bincount(lab_t[edges[0][inside]], minlength=count).float()  # (C,) directed copies
            gate = torch.where(links > 0, gate_sum / links.clamp(min=1), torch.ones(count))
            pooled = torch.zeros(count, h.shape[1]).index_add(0, lab_t, self.deepsets_pre(self.gnn2(h, edges)))
            h = self.deepsets_post(pooled) * (gate * links.clamp(min=1)).unsqueeze(-1)  # (C, H)
            labels = lab[labels]
            src, dst = lab_t[edges[0]], lab_t[edges[1]]
            edges = torch.unique(torch.stack([src[src != dst], dst[src != dst]]), dim=1)
        return self.output_trans(h), labels

    def act(
        self, x: torch.Tensor, graph: HSDAGGraph, generator: torch.Generator, greedy: bool = False
    ) -> tuple[np.ndarray, torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
        """One placement: ``(placement (n,), log_prob (), entropy (), cluster embeddings (C, F), labels (n,))``."""
        clusters, labels = self(x, graph.undirected)
        count = clusters.shape[0]
        lab = torch.as_tensor(labels)
        forbidden = torch.zeros(count, graph.device_mask.shape[1]).index_add(
            0, lab, (~graph.device_mask).float()
        )
        mask = forbidden == 0
        mask[~mask.any(-1)] = True
        devices, logp, ent = sample_categorical(self.classifier(clusters), generator, mask, greedy)
        return devices.numpy()[labels].astype(np.int64), logp.sum(), ent.sum(), clusters, labels


class HSDAG(PlacementMethod):
    """Duan et al. (2024) as released: GCN + graph-parsing pooling + placer, REINFORCE on 1/runtime.

    Args:
        samples_per_update: Placements per episode (= per update; the released code: 20).
        hidden: Network width (128).
        lr: Adam learning rate (1e-3).
        dropout: Network dropout (0.2).
        discount: Discount of the episode return (0.95).
        levels: Graph-parsing levels.
        reward: ``"inverse_runtime"`` (released: ``1 / runtime``, single-device placements fail) or ``"env"``.
        coarsen: ``"none"`` (place the problem's groups) or ``"hsdag"`` (HSDAG's co-location merge first).
        default_budget: Evaluations when ``place`` gets ``budget=None`` (the paper: 500).
        num_threads: Torch intra-op threads while placing.
    """

    name = "hsdag"

    def __init__(
        self,
        samples_per_update: int = 20,
        hidden: int = 128,
        lr: float = 1e-3,
        dropout: float = 0.2,
        discount: float = 0.95,
        levels: int = 1,
        reward: str = "inverse_runtime",
        coarsen: str = "none",
        default_budget: int = DEFAULT_BUDGET,
        num_threads: int = 1,
    ) -> None:
        if reward not in ("inverse_runtime", "env"):
            raise UnknownNameError("hsdag reward", reward, ["env", "inverse_runtime"])
        if coarsen not in ("none", "hsdag"):
            raise UnknownNameError("hsdag coarsen", coarsen, ["hsdag", "none"])
        if levels < 1:
            raise ValueError(f"levels must be >= 1, got {levels}")
        self.samples_per_update, self.hidden, self.lr, self.dropout = samples_per_update, hidden, lr, dropout
        self.discount, self.levels, self.reward, self.coarsen = discount, levels, reward, coarsen
        self.default_budget, self.num_threads = default_budget, num_threads

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        with torch_threads(self.num_threads):
            return self._train(tracker, seed)

    def _train(self, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        graph = HSDAGGraph(tracker.problem, self.coarsen == "hsdag")
        policy = seeded_module(
            lambda: HSDAGPolicy(
                graph.x.shape[1], graph.device_mask.shape[1], self.hidden, self.dropout, self.levels
            ),
            seed,
        )
        policy.train()  # the released code samples with dropout active
        gen = make_generator(seed)
        cluster_counts: list[float] = []

        def episode(k: int) -> SampleBatch:
            x = graph.x
            placements, logps, ents, counts = [], [], [], []
            with torch.random.fork_rng(devices=[]):  # dropout masks from the method's own generator
                torch.manual_seed(int(torch.randint(2**62, (1,), generator=gen)))
                for _ in range(k):
                    placement, logp, ent, clusters, labels = policy.act(x, graph, gen)
                    x = x + clusters.detach()[torch.as_tensor(labels)]  # the state update between steps
                    placements.append(placement[graph.group])
                    logps.append(logp)
                    ents.append(ent)
                    counts.append(clusters.shape[0])
            cluster_counts.append(float(np.mean(counts)))
            return SampleBatch(np.stack(placements), torch.stack(logps), torch.stack(ents))

        def inverse_runtime(placement: np.ndarray, latency: float, env_reward: float) -> float:
            failed = not np.isfinite(latency) or (placement == placement[0]).all()  # single device: a failure
            return 1.0 / (FAILURE_RUNTIME if failed else latency)

        budget = budget_of(tracker, self.default_budget)
        curve = reinforce(
            tracker,
            budget,
            episode,
            torch.optim.Adam(policy.parameters(), lr=self.lr),
            self.samples_per_update,
            reward=inverse_runtime if self.reward == "inverse_runtime" else None,
            baseline=DiscountedReturn(self.discount),
            max_grad_norm=None,
        )
        for point, clusters in zip(curve, cluster_counts):
            point["mean_clusters"] = clusters
        return {
            **training_extras(curve, tracker, budget),
            "policy": policy,
            "reward": self.reward,
            "coarsen": self.coarsen,
            "groups_placed": graph.num_nodes,
        }
