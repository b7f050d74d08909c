"""RL device placement with a sequence-to-sequence policy (Mirhoseini et al., ICML 2017).

Paper: A. Mirhoseini, H. Pham, Q. V. Le, B. Steiner, R. Larsen, Y. Zhou, N. Kumar, M. Norouzi, S. Bengio,
J. Dean. "Device Placement Optimization with Reinforcement Learning." ICML 2017.

The groups of the env's coarse graph, in topological order, are embedded (op-type mix, output size,
adjacency) and read by an LSTM encoder; an attentional LSTM decoder emits one device per group, fed the
previous device. Training is REINFORCE with ``K`` sampled placements per update and a moving-average
baseline, until the evaluation budget is spent.

Deviations from the paper:

* Reward: the paper minimises the square root of the measured runtime (TensorFlow's later implementation)
  with a large fixed penalty for failing placements. Here the reward is ``-sqrt(latency / L_single)``
  (``L_single``: the env's best single-device latency, so it is scale-free across graphs) and an
  infeasible placement gets ``-sqrt(infeasible_ratio)`` (default ratio 100). ``reward="env"`` uses the
  env's own reward instead.
* Groups are the env's coarsening (fused layers by default), not TensorFlow co-location groups.
* Adjacency embedding: a learned projection of each group's in/out adjacency row (graph-specific, like
  the paper's index-based adjacency), plus the env's degree features.
* Attention is Luong's multiplicative ("general") attention rather than Bahdanau's additive one, and the
  decoder also reads the encoder output of the group it places (memory stays linear in the graph size).
* Advantages are divided by the batch's reward std; gradients are clipped; Adam instead of SGD.
* The training graph is placed by simulation or measurement through the env; no distributed training.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from agents.base import BudgetTracker, PlacementMethod
from agents.systems.common import (
    DEFAULT_BUDGET,
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
from placement_gym.errors import UnknownNameError
from placement_gym.features import NODE_FEATURES

#: Columns of the env's node features that the paper's embedding uses: output size, degrees, op-type mix.
_OP_COLUMNS = [
    i
    for i, name in enumerate(NODE_FEATURES)
    if name in ("log_out_bytes", "log_in_degree", "log_out_degree") or name.startswith("frac_")
]


class Seq2SeqPlacer(nn.Module):
    """LSTM encoder over a sequence of items, attentional LSTM decoder emitting one device per item.

    Args:
        in_dim: Item embedding size.
        hidden: LSTM width ``H``.
        num_devices: ``D``.
    """

    def __init__(self, in_dim: int, hidden: int, num_devices: int) -> None:
        super().__init__()
        self.num_devices = num_devices
        self.proj = nn.Linear(in_dim, hidden)
        self.encoder = nn.LSTM(hidden, hidden, batch_first=True)
        self.device_embedding = nn.Embedding(num_devices + 1, hidden)  # index D = start token
        self.decoder = nn.LSTMCell(2 * hidden, hidden)
        self.attn = nn.Linear(hidden, hidden, bias=False)
        self.out = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.Tanh(), nn.Linear(hidden, num_devices))

    def forward(
        self,
        items: torch.Tensor,
        generator: torch.Generator,
        mask: torch.Tensor | None = None,
        greedy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Decode one device per item.

        Args:
            items: ``(k, T, in_dim)`` item embeddings (one sequence per sample).
            generator: Sampling randomness.
            mask: ``(T, D)`` bool allowed devices, or ``None``.
            greedy: Argmax decoding.

        Returns:
            ``(devices (k, T) int64, log_prob (k,), entropy (k,))``.
        """
        k, t_len, _ = items.shape
        enc, (h, c) = self.encoder(torch.tanh(self.proj(items)))  # (k, T, H)
        keys = self.attn(enc)  # (k, T, H)
        prev = torch.full((k,), self.num_devices, dtype=torch.long)
        h, c = h[0], c[0]
        actions, logps, ents = [], [], []
        for t in range(t_len):
            h, c = self.decoder(torch.cat([self.device_embedding(prev), enc[:, t]], dim=-1), (h, c))
            weights = torch.softmax(torch.bmm(keys, h.unsqueeze(-1)).squeeze(-1), dim=-1)  # (k, T)
            context = torch.bmm(weights.unsqueeze(1), enc).squeeze(1)  # (k, H)
            logits = self.out(torch.cat([h, context], dim=-1))  # (k, D)
            a, lp, en = sample_categorical(logits, generator, None if mask is None else mask[t], greedy)
            actions.append(a)
            logps.append(lp)
            ents.append(en)
            prev = a
        return torch.stack(actions, 1), torch.stack(logps, 1).sum(1), torch.stack(ents, 1).sum(1)


class RLPolicy(nn.Module):
    """The paper's embedding of groups (op types, output size, adjacency) feeding a :class:`Seq2SeqPlacer`.

    Args:
        num_groups: ``G`` (the adjacency projection is specific to one graph, as in the paper).
        num_devices: ``D``.
        hidden: Width ``H``.
    """

    def __init__(self, num_groups: int, num_devices: int, hidden: int = 64) -> None:
        super().__init__()
        self.adjacency = nn.Linear(2 * num_groups, hidden // 2, bias=False)
        self.placer = Seq2SeqPlacer(len(_OP_COLUMNS) + hidden // 2, hidden, num_devices)

    def embed(self, x: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
        """``(G, len(_OP_COLUMNS) + H/2)`` group embeddings from features ``x`` and ``(G, 2G)`` adjacency."""
        return torch.cat([x[:, _OP_COLUMNS], self.adjacency(adjacency)], dim=-1)


def _adjacency_rows(edge_index: torch.Tensor, g: int) -> torch.Tensor:
    """``(G, 2G)``: row ``i`` holds ``i``'s predecessors (first half) and successors (second half)."""
    adj = torch.zeros(g, 2 * g)
    src, dst = edge_index
    adj[dst, src] = 1.0
    adj[src, g + dst] = 1.0
    return adj


class RLPlacement(PlacementMethod):
    """Mirhoseini et al. (2017): seq2seq policy over groups trained with REINFORCE.

    Args:
        samples_per_update: ``K`` placements sampled (and evaluated) per policy update.
        hidden: LSTM width.
        lr: Adam learning rate.
        baseline_decay: Decay of the moving-average reward baseline.
        entropy_coef: Entropy bonus weight.
        reward: ``"sqrt_runtime"`` (the paper's shape, see module docstring) or ``"env"``.
        infeasible_ratio: Latency ratio charged to an infeasible placement under ``"sqrt_runtime"``.
        default_budget: Evaluations when ``place`` gets ``budget=None``.
        num_threads: Torch intra-op threads while placing.
    """

    name = "rl_placement"

    def __init__(
        self,
        samples_per_update: int = 20,
        hidden: int = 64,
        lr: float = 1e-2,
        baseline_decay: float = 0.9,
        entropy_coef: float = 0.0,
        reward: str = "sqrt_runtime",
        infeasible_ratio: float = 100.0,
        default_budget: int = DEFAULT_BUDGET,
        num_threads: int = 1,
    ) -> None:
        if reward not in ("sqrt_runtime", "env"):
            raise UnknownNameError("rl_placement reward", reward, ["env", "sqrt_runtime"])
        self.samples_per_update, self.hidden, self.lr = samples_per_update, hidden, lr
        self.baseline_decay, self.entropy_coef = baseline_decay, entropy_coef
        self.reward, self.infeasible_ratio, self.default_budget = reward, infeasible_ratio, default_budget
        self.num_threads = num_threads

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        with torch_threads(self.num_threads):
            return self._train(env, tracker, seed)

    def _train(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        graph = graph_tensors(tracker.problem)
        g, d = graph.num_nodes, graph.num_devices
        policy = seeded_module(lambda: RLPolicy(g, d, self.hidden), seed)
        gen = make_generator(seed)
        adjacency = _adjacency_rows(graph.edge_index, g)
        single = tracker.problem.baseline.latency

        def sample(k: int) -> SampleBatch:
            items = policy.embed(graph.x, adjacency).unsqueeze(0).expand(k, -1, -1)
            devices, logp, ent = policy.placer(items, gen, graph.device_mask)
            return SampleBatch(devices.numpy().astype(np.int64), logp, ent)

        def sqrt_runtime(latency: float, env_reward: float) -> float:
            return -math.sqrt(latency / single if math.isfinite(latency) else self.infeasible_ratio)

        curve = reinforce(
            tracker,
            budget_of(tracker, self.default_budget),
            sample,
            torch.optim.Adam(policy.parameters(), lr=self.lr),
            self.samples_per_update,
            reward=sqrt_runtime if self.reward == "sqrt_runtime" else None,
            baseline=MovingAverageBaseline(self.baseline_decay),
            entropy_coef=self.entropy_coef,
        )
        return {"curve": curve, "policy": policy, "reward": self.reward}
