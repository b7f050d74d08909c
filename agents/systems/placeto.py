"""Placeto: iterative placement with graph embeddings (Addanki et al., NeurIPS 2019).

Paper: R. Addanki, S. Bojja Venkatakrishnan, S. Gupta, H. Mao, M. Alizadeh. "Placeto: Learning
Generalizable Device Placement Algorithms for Distributed Machine Learning." NeurIPS 2019.

An episode visits the groups one at a time in topological order (the env's ``mode="sequential"``
process). At each step the state is exactly the env's sequential observation: static group features,
the one-hot device of every group placed so far (zeros if unplaced) and a one-hot of the current group.
A message-passing embedding runs ``rounds`` layers of parent-to-child (forward) and child-to-parent
(backward) mean aggregation; a policy head reads the current group's forward and backward embeddings and
a mean-pooled graph summary and picks the group's device. Nothing in the policy depends on the graph's
size, so a policy trained on one graph places unseen graphs (``Placeto(policy=trained, train=False)``).

Evaluation counting: the episode is emulated inside the method (whatever the env's mode), and only the
complete placement at its end is evaluated, through the budget tracker: **one evaluated placement per
episode**, no intermediate evaluations. ``K`` episodes are rolled out in parallel per policy update.

Deviations from the paper:

* Reward: the final env reward of the episode (speedup over the best single device minus 1) for every
  step, not Placeto's per-step runtime improvement, which would cost one evaluation per step (``G`` per
  episode) against the budget. No memory penalty: the env's backend reports over-full devices as
  infeasible (reward -1).
* The embedding is ``rounds`` layers of mean message passing in each direction, not Placeto's full
  topological-order sweeps and its parent/child/parallel node groupings; the head uses a global mean
  instead of the three pooled groups.
* Nodes start unplaced (the env's sequential semantics) instead of from an initial placement that each
  step revisits.
* Log-probabilities are recomputed after the rollout in chunks of steps (same gradient, bounded memory).
* Advantages are divided by the batch's reward std; gradients are clipped; Adam.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

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
from placement_gym.errors import PlacementError

_CHUNK_ROWS = 100_000  # node rows per log-prob recomputation chunk (bounds autograd memory)


class PlacetoPolicy(nn.Module):
    """Message-passing state embedding and per-node device head; independent of the graph's size.

    Args:
        feat_dim: Static node feature size ``F``.
        num_devices: ``D``.
        hidden: Width ``H``.
        rounds: Message-passing layers per direction.
    """

    def __init__(self, feat_dim: int, num_devices: int, hidden: int = 32, rounds: int = 2) -> None:
        super().__init__()
        self.feat_dim, self.num_devices = feat_dim, num_devices
        self.inp = nn.Linear(feat_dim + num_devices + 1, hidden)
        self.fwd = nn.ModuleList(nn.Linear(2 * hidden, hidden) for _ in range(rounds))
        self.bwd = nn.ModuleList(nn.Linear(2 * hidden, hidden) for _ in range(rounds))
        self.head = nn.Sequential(nn.Linear(4 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_devices))

    def logits(self, graph: GraphTensors, placed: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
        """Device logits of the current node in each of ``B`` states.

        Args:
            graph: The group graph (``G`` nodes).
            placed: ``(B, G, D)`` one-hot devices of placed nodes (zero rows: unplaced).
            current: ``(B,)`` int64 index of the node to place in each state.

        Returns:
            ``(B, D)`` logits.
        """
        b, g = placed.shape[:2]
        cur = F.one_hot(current, g).float().unsqueeze(-1)  # (B, G, 1)
        state = torch.cat([graph.x.expand(b, -1, -1), placed, cur], dim=-1)  # (B, G, F + D + 1)
        h0 = torch.relu(self.inp(state))
        src, dst = graph.edge_index
        in_deg = torch.bincount(dst, minlength=g).clamp(min=1).float().view(1, g, 1)
        out_deg = torch.bincount(src, minlength=g).clamp(min=1).float().view(1, g, 1)
        fwd = bwd = h0
        for layer in self.fwd:
            agg = torch.zeros_like(fwd).index_add(1, dst, fwd[:, src]) / in_deg  # mean over parents
            fwd = torch.relu(layer(torch.cat([fwd, agg], dim=-1)))
        for layer in self.bwd:
            agg = torch.zeros_like(bwd).index_add(1, src, bwd[:, dst]) / out_deg  # mean over children
            bwd = torch.relu(layer(torch.cat([bwd, agg], dim=-1)))
        emb = torch.cat([fwd, bwd], dim=-1)  # (B, G, 2H)
        node = emb[torch.arange(b), current]  # (B, 2H)
        return self.head(torch.cat([node, emb.mean(1)], dim=-1))


def rollout(
    policy: PlacetoPolicy, graph: GraphTensors, k: int, generator: torch.Generator, greedy: bool = False
) -> np.ndarray:
    """Run ``k`` episodes without gradients: ``(k, G)`` int64 placements."""
    g, d = graph.num_nodes, graph.num_devices
    placed = torch.zeros(k, g, d)
    actions = torch.zeros(k, g, dtype=torch.long)
    with torch.no_grad():
        for t in range(g):
            logits = policy.logits(graph, placed, torch.full((k,), t, dtype=torch.long))
            a, _, _ = sample_categorical(logits, generator, graph.device_mask[t], greedy)
            actions[:, t] = a
            placed[torch.arange(k), t, a] = 1.0
    return actions.numpy().astype(np.int64)


class _EpisodeBatch(SampleBatch):
    """Episodes whose log-probabilities are recomputed, step chunk by step chunk, at update time."""

    def __init__(self, placements: np.ndarray, policy: PlacetoPolicy, graph: GraphTensors) -> None:
        super().__init__(placements)
        self.policy, self.graph = policy, graph

    def backward(self, advantages: torch.Tensor, entropy_coef: float) -> float:
        k, g = self.placements.shape
        d = self.graph.num_devices
        actions = torch.as_tensor(self.placements)
        onehot = F.one_hot(actions, d).float()  # (k, G, D)
        chunk = max(1, _CHUNK_ROWS // max(k * g, 1))
        total = 0.0
        for start in range(0, g, chunk):
            steps = torch.arange(start, min(start + chunk, g))
            before = (torch.arange(g).view(1, g) < steps.view(-1, 1)).float()  # (c, G)
            placed = (onehot.unsqueeze(0) * before.view(-1, 1, g, 1)).reshape(-1, g, d)  # (c*k, G, D)
            current = steps.repeat_interleave(k)  # (c*k,)
            logits = self.policy.logits(self.graph, placed, current)
            logits = logits.masked_fill(~self.graph.device_mask[current], -1e9)
            logp = torch.log_softmax(logits, dim=-1)
            chosen = logp.gather(-1, actions[:, steps].T.reshape(-1, 1)).squeeze(-1)  # (c*k,)
            loss = -(advantages.repeat(len(steps)) * chosen).sum() / k
            if entropy_coef:
                loss = loss + entropy_coef * (logp.exp() * logp).sum() / k
            loss.backward()
            total += float(loss.detach())
        return total


class Placeto(PlacementMethod):
    """Addanki et al. (2019): sequential placement with a message-passing policy, REINFORCE.

    Args:
        policy: A trained :class:`PlacetoPolicy` to start from (e.g. ``result.extra["policy"]`` of a run
            on another graph); ``None`` builds a fresh one from the seed.
        train: Update the policy. ``False`` (needs ``policy``): evaluate the greedy episode, then spend any
            remaining budget on sampled episodes, without updates.
        samples_per_update: Episodes (= evaluated placements) per update.
        hidden: Embedding width.
        rounds: Message-passing layers per direction.
        lr: Adam learning rate.
        baseline_decay: Moving-average baseline decay.
        entropy_coef: Entropy bonus weight.
        default_budget: Evaluations when ``place`` gets ``budget=None``.
        num_threads: Torch intra-op threads while placing.
    """

    name = "placeto"

    def __init__(
        self,
        policy: PlacetoPolicy | None = None,
        train: bool = True,
        samples_per_update: int = 20,
        hidden: int = 32,
        rounds: int = 2,
        lr: float = 1e-2,
        baseline_decay: float = 0.9,
        entropy_coef: float = 0.0,
        default_budget: int = DEFAULT_BUDGET,
        num_threads: int = 1,
    ) -> None:
        if not train and policy is None:
            raise ValueError("Placeto(train=False) needs a trained policy= to place with")
        self.policy, self.train = policy, train
        self.samples_per_update, self.hidden, self.rounds, self.lr = samples_per_update, hidden, rounds, lr
        self.baseline_decay, self.entropy_coef = baseline_decay, entropy_coef
        self.default_budget, self.num_threads = default_budget, num_threads

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        with torch_threads(self.num_threads):
            return self._run(env, tracker, seed)

    def _run(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        graph = graph_tensors(tracker.problem)
        if self.policy is None:
            policy = seeded_module(
                lambda: PlacetoPolicy(graph.x.shape[1], graph.num_devices, self.hidden, self.rounds), seed
            )
        else:
            if (self.policy.feat_dim, self.policy.num_devices) != (graph.x.shape[1], graph.num_devices):
                raise PlacementError(
                    f"the given Placeto policy places on {self.policy.num_devices} devices with "
                    f"{self.policy.feat_dim} node features; this env has {graph.num_devices} devices and "
                    f"{graph.x.shape[1]} features"
                )
            policy = copy.deepcopy(self.policy)  # fine-tuning must not change the caller's policy
        gen = make_generator(seed)
        if not self.train:
            tracker.evaluate(rollout(policy, graph, 1, gen, greedy=True)[0])
            remaining = (tracker.budget or 1) - tracker.used
            if remaining > 0:
                tracker.evaluate_batch(rollout(policy, graph, remaining, gen))
            return {"curve": [], "policy": policy}
        curve = reinforce(
            tracker,
            budget_of(tracker, self.default_budget),
            lambda k: _EpisodeBatch(rollout(policy, graph, k, gen), policy, graph),
            torch.optim.Adam(policy.parameters(), lr=self.lr),
            self.samples_per_update,
            baseline=MovingAverageBaseline(self.baseline_decay),
            entropy_coef=self.entropy_coef,
        )
        return {"curve": curve, "policy": policy}
