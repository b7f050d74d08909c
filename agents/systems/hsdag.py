"""HSDAG: hierarchical structure-aware device assignment (Duan et al., NeurIPS 2024).

Paper: S. Duan, H. Ping, N. Kanakaris, X. Xiao, P. Kyriakis, N. K. Ahmed, P. Zhang, G. Ma, M. Capota,
S. Nazarian, T. L. Willke, P. Bogdan. "A Structure-Aware Framework for Learning Device Placements on
Computation Graphs." NeurIPS 2024.

Pipeline on the env's (already coarsened) group graph:

1. node representations: two GCN layers over the undirected group graph;
2. graph-parsing-network pooling: an MLP scores every edge from its endpoints' embeddings and the bytes it
   carries; each edge is kept with probability ``sigmoid(score)``; the connected components of the kept
   edges are the groups, so the number of groups is not fixed but learned with the policy;
3. a placer: one GCN layer over the pooled (component) graph and an MLP giving each component a device
   distribution; every node takes its component's device;
4. REINFORCE on the joint log-probability of the keep decisions and the device choices, ``K`` placements
   per update (default 20 x 25 updates = the paper's 500 evaluations), moving-average baseline.

Deviations from the paper / its public code:

* Reward: the env's reward (default: speedup over the best single device minus 1; infeasible: -1) rather
  than ``1 / runtime``; both are decreasing in latency, the env's is scale-free across graphs.
* Graph construction and coarsening are the env's (fused layers by default), not HSDAG's own
  single-successor merging; node features are the env's (op-type mix, FLOPs, bytes, degrees, topological
  position; the released code also uses op-type mix plus an index).
* Parsing: GPN (Song et al., ICLR 2024) keeps each node's dominant edge deterministically and trains the
  scores through a gating of pooled features; here keep/contract decisions are Bernoulli samples trained
  by the same policy gradient as the placer, and only one pooling level is used.
* Advantages are divided by the batch's reward std; gradients are clipped; Adam.
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
    GraphTensors,
    MovingAverageBaseline,
    SampleBatch,
    budget_of,
    graph_tensors,
    make_generator,
    reinforce,
    sample_categorical,
    seeded_module,
    torch_threads,
)


def _undirected(edge_index: torch.Tensor) -> torch.Tensor:
    """``(2, 2m)``: both directions of each edge."""
    return torch.cat([edge_index, edge_index.flip(0)], dim=1)


def components(num_nodes: int, edge_index: torch.Tensor, keep: np.ndarray) -> tuple[int, np.ndarray]:
    """Connected components of the kept edges: ``(count, label of each node (n,) int64)``."""
    src, dst = edge_index[:, keep].numpy()
    adj = coo_matrix((np.ones(len(src)), (src, dst)), shape=(num_nodes, num_nodes))
    count, labels = connected_components(adj, directed=False)
    return int(count), labels.astype(np.int64)


class HSDAGPolicy(nn.Module):
    """GCN encoder, edge-scoring parser and component placer.

    Args:
        in_dim: Node feature size ``F``.
        num_devices: ``D``.
        hidden: Width ``H``.
        keep_bias: Initial logit of keeping an edge (positive: start from larger groups).
    """

    def __init__(self, in_dim: int, num_devices: int, hidden: int = 64, keep_bias: float = 1.0) -> None:
        super().__init__()
        self.gcn1, self.gcn2 = GCNConv(in_dim, hidden), GCNConv(hidden, hidden)
        self.edge_score = nn.Sequential(nn.Linear(2 * hidden + 1, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        nn.init.constant_(self.edge_score[2].bias, keep_bias)
        self.group_gcn = GCNConv(hidden, hidden)
        self.placer = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_devices))

    def embed(self, graph: GraphTensors) -> tuple[torch.Tensor, torch.Tensor]:
        """Node embeddings ``(G, H)`` and edge keep probabilities ``(m,)``."""
        und = _undirected(graph.edge_index)
        h = torch.relu(self.gcn1(graph.x, und))
        h = torch.relu(self.gcn2(h, und))
        src, dst = graph.edge_index
        logit = self.edge_score(torch.cat([h[src], h[dst], graph.edge_attr], dim=-1)).squeeze(-1)
        return h, torch.sigmoid(logit)

    def place_groups(
        self,
        h: torch.Tensor,
        graph: GraphTensors,
        labels: np.ndarray,
        count: int,
        generator: torch.Generator,
        greedy: bool = False,
    ) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
        """Pool nodes into components and sample a device per component.

        Args:
            h: ``(G, H)`` node embeddings.
            graph: The group graph.
            labels: ``(G,)`` component of each node, ``0..count-1``.
            count: Number of components ``C``.
            generator: Sampling randomness.
            greedy: Argmax devices.

        Returns:
            ``(placement (G,) int64, log_prob (), entropy ())``.
        """
        lab = torch.as_tensor(labels)
        sizes = torch.bincount(lab, minlength=count).clamp(min=1).unsqueeze(-1).float()
        pooled = torch.zeros(count, h.shape[1]).index_add(0, lab, h) / sizes  # (C, H)
        src, dst = lab[graph.edge_index[0]], lab[graph.edge_index[1]]
        cross = src != dst
        pairs = torch.unique(torch.stack([src[cross], dst[cross]]), dim=1)  # (2, m_C)
        z = torch.relu(self.group_gcn(pooled, _undirected(pairs)))  # (C, H)
        logits = self.placer(torch.cat([z, z.mean(0, keepdim=True).expand_as(z)], dim=-1))  # (C, D)
        forbidden = torch.zeros(count, graph.num_devices).index_add(0, lab, (~graph.device_mask).float())
        mask = forbidden == 0
        mask[~mask.any(-1)] = True
        devices, logp, ent = sample_categorical(logits, generator, mask, greedy)
        return devices.numpy()[labels].astype(np.int64), logp.sum(), ent.sum()


class HSDAG(PlacementMethod):
    """Duan et al. (2024): GCN + graph-parsing pooling + placer, trained end to end with REINFORCE.

    Args:
        samples_per_update: Placements sampled (and evaluated) per update (the paper: 20 per episode).
        hidden: GNN width.
        lr: Adam learning rate.
        baseline_decay: Moving-average baseline decay (0: batch mean).
        entropy_coef: Entropy bonus weight.
        keep_bias: Initial edge-keep logit.
        default_budget: Evaluations when ``place`` gets ``budget=None`` (the paper: 500).
        num_threads: Torch intra-op threads while placing.
    """

    name = "hsdag"

    def __init__(
        self,
        samples_per_update: int = 20,
        hidden: int = 64,
        lr: float = 3e-3,
        baseline_decay: float = 0.9,
        entropy_coef: float = 0.0,
        keep_bias: float = 1.0,
        default_budget: int = DEFAULT_BUDGET,
        num_threads: int = 1,
    ) -> None:
        self.samples_per_update, self.hidden, self.lr = samples_per_update, hidden, lr
        self.baseline_decay, self.entropy_coef, self.keep_bias = baseline_decay, entropy_coef, keep_bias
        self.default_budget, self.num_threads = default_budget, num_threads

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        with torch_threads(self.num_threads):
            return self._train(env, tracker, seed)

    def _train(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        graph = graph_tensors(tracker.problem)
        policy = seeded_module(
            lambda: HSDAGPolicy(graph.x.shape[1], graph.num_devices, self.hidden, self.keep_bias), seed
        )
        gen = make_generator(seed)
        group_counts: list[float] = []

        def sample(k: int) -> SampleBatch:
            h, p = policy.embed(graph)
            keep = torch.bernoulli(p.detach().expand(k, -1), generator=gen)  # (k, m)
            keep_logp = (keep * torch.log(p + 1e-9) + (1 - keep) * torch.log(1 - p + 1e-9)).sum(-1)
            keep_ent = -(p * torch.log(p + 1e-9) + (1 - p) * torch.log(1 - p + 1e-9)).sum()
            placements, logps, ents, counts = [], [], [], []
            for i in range(k):
                count, labels = components(graph.num_nodes, graph.edge_index, keep[i].bool().numpy())
                placement, logp, ent = policy.place_groups(h, graph, labels, count, gen)
                placements.append(placement)
                logps.append(logp)
                ents.append(ent)
                counts.append(count)
            group_counts.append(float(np.mean(counts)))
            return SampleBatch(
                np.stack(placements), keep_logp + torch.stack(logps), keep_ent + torch.stack(ents)
            )

        curve = reinforce(
            tracker,
            budget_of(tracker, self.default_budget),
            sample,
            torch.optim.Adam(policy.parameters(), lr=self.lr),
            self.samples_per_update,
            baseline=MovingAverageBaseline(self.baseline_decay),
            entropy_coef=self.entropy_coef,
        )
        for point, groups in zip(curve, group_counts):
            point["mean_groups"] = groups
        return {"curve": curve, "policy": policy}
