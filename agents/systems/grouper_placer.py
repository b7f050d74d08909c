"""Hierarchical grouper-placer (Mirhoseini et al., ICLR 2018; Liu et al., HP3C 2019).

Papers: A. Mirhoseini, A. Goldie, H. Pham, B. Steiner, Q. V. Le, J. Dean. "A Hierarchical Model for Device
Placement." ICLR 2018. Liu et al., HP3C 2019 (fully-connected grouper on op information). Public code:
the authors' TensorFlow controller, ``tensorflow/python/grappler/hierarchical_controller.py``.

As in the paper and the controller:

* a feed-forward grouper (one linear layer of width 64, no activation, then a softmax over ``G'`` groups,
  ``G' = min(256, 20 x D)``) samples a group for every op of the problem's op graph
  (``problem.coarse.ops``) from the op's features; its logits get the controller's noise (0.5 x RMS for
  the first 750 samples);
* each group is embedded from its ops as the controller does: its inter-group adjacency (edges to and from
  every other group, ``2 G'`` columns), the sum of its ops' features, the row divided by its maximum + 1;
* the placer is the sequence-to-sequence model of :mod:`agents.systems.rl_placement` (bidirectional LSTM
  encoder, attentional decoder, width 512, temperature 10, tanh constant 5, logit noise) over the groups;
* one grouping (m = 1) and ``k = 4`` placements of it per update; the grouper's log-probability is
  weighted by the mean advantage of its placements, each placement's by its own (Eqs. 4 and 6);
* reward ``sqrt(runtime)``, failing signal 100 s, a moving-average baseline (decay 0.9) starting at the
  failing signal; Adam, fixed learning rate 0.1, gradient norm clipped to 1.0.

Deviations:

* The problem places its own groups (fused layers by default), not single ops. Ops of one problem group
  may be sent to different devices by the grouper; the problem group then goes to the device holding most
  of its FLOPs (``flops + 1`` weighted vote, ties to the lower device index). This mapping is a
  deterministic function of the sampled choices, so the policy gradient stays unbiased.
* Runtimes are divided by the best single-device latency before the square root (see
  :mod:`agents.systems.rl_placement`); the failing signal is 100 x that latency.
* Op features are the project's (op-type mix, FLOPs, bytes, degrees, topological position) instead of a
  type index, padded output shapes and a list of neighbour indices; a group's embedding sums them.
* Attention is multiplicative, as in :mod:`agents.systems.rl_placement`.
* Temperature and tanh clipping apply to the placer only, as in the controller's code (the paper's
  sentence lists T = 10 and C = 5 for both policies); ``K`` placements share one moving-average update
  per sample as in :mod:`agents.systems.rl_placement`.
* Device memory masks are not applied (the grouper does not see problem groups); an over-full device is
  reported infeasible by the backend and rewarded as a failure.
* On a deterministic backend a placement sampled again is looked up rather than re-measured.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from agents.base import BudgetTracker, PlacementMethod
from agents.systems.common import (
    DEFAULT_BUDGET,
    MovingAverageBaseline,
    SampleBatch,
    budget_of,
    make_generator,
    op_tensors,
    reinforce,
    sample_categorical,
    seeded_module,
    torch_threads,
    training_extras,
)
from agents.systems.rl_placement import Exploration, Seq2SeqPlacer, sqrt_runtime_reward


def default_num_groups(num_ops: int, num_devices: int) -> int:
    """TensorFlow's default ``min(256, 20 x devices)``, capped by the number of ops."""
    return max(1, min(256, 20 * num_devices, num_ops))


def group_embeddings(
    x: torch.Tensor, edge_index: torch.Tensor, groups: torch.Tensor, num_groups: int
) -> torch.Tensor:
    """The controller's group embedding: inter-group adjacency (out, in) and summed op features.

    Args:
        x: ``(n, F)`` op features.
        edge_index: ``(2, m)`` op edges.
        groups: ``(k, n)`` int64 group of each op per sample.
        num_groups: ``G'``.

    Returns:
        ``(k, G', 2 G' + F)``, each row divided by its maximum + 1.
    """
    k = groups.shape[0]
    src, dst = groups[:, edge_index[0]], groups[:, edge_index[1]]  # (k, m)
    flat = (torch.arange(k).unsqueeze(1) * num_groups + src) * num_groups + dst
    dag = torch.bincount(flat.reshape(-1), minlength=k * num_groups * num_groups).float()
    dag = dag.reshape(k, num_groups, num_groups)  # dag[s, i, j]: op edges from group i to group j
    onehot = F.one_hot(groups, num_groups).float()  # (k, n, G')
    feats = torch.bmm(onehot.transpose(1, 2), x.expand(k, -1, -1))  # (k, G', F)
    emb = torch.cat([dag, dag.transpose(1, 2), feats], dim=-1)
    return emb / (emb.amax(dim=-1, keepdim=True) + 1.0)


class GrouperPlacerPolicy(nn.Module):
    """Feed-forward grouper over ops and seq2seq placer over groups.

    Args:
        op_dim: Op feature size ``F``.
        num_groups: ``G'``.
        num_devices: ``D``.
        hidden: Placer width ``H`` (512).
        grouping_hidden: Grouper width (64).
    """

    def __init__(
        self, op_dim: int, num_groups: int, num_devices: int, hidden: int = 512, grouping_hidden: int = 64
    ) -> None:
        super().__init__()
        self.num_groups = num_groups
        self.grouper = nn.Sequential(
            nn.Linear(op_dim, grouping_hidden, bias=False), nn.Linear(grouping_hidden, num_groups, bias=False)
        )
        for layer in self.grouper:
            nn.init.xavier_uniform_(layer.weight)
        self.placer = Seq2SeqPlacer(2 * num_groups + op_dim, hidden, num_devices)

    def forward(
        self,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        k: int,
        generator: torch.Generator,
        grouper_noise: Exploration,
        placer_exploration: Exploration,
        greedy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample one grouping and ``k`` placements of its groups.

        Args:
            x: ``(n, F)`` op features.
            edge_index: ``(2, m)`` op edges.
            k: Placements.
            generator: Sampling randomness.
            grouper_noise: Noise of the grouper's logits (no temperature, no clipping).
            placer_exploration: Exploration of the placer's logits.
            greedy: Argmax choices.

        Returns:
            ``(op_devices (k, n) int64, groups (n,) int64, log_prob (k,), entropy (k,))``; the grouping's
            log-probability and entropy are included in every sample's.
        """
        noisy = not greedy and grouper_noise.noisy()
        logits = grouper_noise(self.grouper(x), generator, noisy)  # (n, G')
        groups, g_logp, g_ent = sample_categorical(logits, generator, greedy=greedy)  # (n,)
        if not greedy:
            grouper_noise.samples += 1
        items = group_embeddings(x, edge_index, groups.unsqueeze(0), self.num_groups)[0]  # (G', 2G' + F)
        devices, p_logp, p_ent = self.placer(
            items, generator, placer_exploration, greedy=greedy, k=k
        )  # (k, G')
        return devices[:, groups], groups, g_logp.sum() + p_logp, g_ent.sum() + p_ent


def vote(op_devices: np.ndarray, assignment: np.ndarray, weights: np.ndarray, g: int, d: int) -> np.ndarray:
    """Device of each env group: the one holding most of its ops' weight.

    Args:
        op_devices: ``(k, n)`` device of each op per sample.
        assignment: ``(n,)`` env group of each op.
        weights: ``(n,)`` op weights (positive).
        g: Env groups ``G``.
        d: Devices ``D``.

    Returns:
        ``(k, G)`` int64 placements (ties go to the lower device index).
    """
    k, n = op_devices.shape
    idx = (np.arange(k)[:, None] * g + assignment[None, :]) * d + op_devices
    totals = np.bincount(idx.reshape(-1), weights=np.tile(weights, k), minlength=k * g * d)
    return totals.reshape(k, g, d).argmax(-1).astype(np.int64)


class GrouperPlacer(PlacementMethod):
    """Grouper-placer trained jointly with REINFORCE (Mirhoseini et al. 2018; Liu et al. 2019).

    Args:
        num_groups: ``G'``; default ``min(256, 20 x devices)`` capped by the op count.
        samples_per_update: Placements of each sampled grouping per update (the paper's k = 4).
        hidden: Placer width (512).
        grouping_hidden: Grouper width (64).
        lr: Adam learning rate (0.1, fixed).
        baseline_decay: Moving-average baseline decay (0.9).
        temperature, tanh_constant: Placer logits (10, 5).
        noise_std, noise_samples: Logit noise of grouper and placer (0.5 x RMS, first 750 samples).
        failing_ratio: Runtime, relative to the best single device, charged to a failing placement (100).
        max_grad_norm: Gradient-norm clip (1.0).
        default_budget: Evaluations when ``place`` gets ``budget=None``.
        num_threads: Torch intra-op threads while placing.
    """

    name = "grouper_placer"

    def __init__(
        self,
        num_groups: int | None = None,
        samples_per_update: int = 4,
        hidden: int = 512,
        grouping_hidden: int = 64,
        lr: float = 0.1,
        baseline_decay: float = 0.9,
        temperature: float = 10.0,
        tanh_constant: float = 5.0,
        noise_std: float = 0.5,
        noise_samples: int = 750,
        failing_ratio: float = 100.0,
        max_grad_norm: float = 1.0,
        default_budget: int = DEFAULT_BUDGET,
        num_threads: int = 1,
    ) -> None:
        if num_groups is not None and num_groups < 1:
            raise ValueError(f"num_groups must be >= 1, got {num_groups}")
        self.num_groups, self.samples_per_update = num_groups, samples_per_update
        self.hidden, self.grouping_hidden, self.lr = hidden, grouping_hidden, lr
        self.baseline_decay, self.failing_ratio, self.max_grad_norm = (
            baseline_decay,
            failing_ratio,
            max_grad_norm,
        )
        self.placer_exploration = dict(
            temperature=temperature,
            tanh_constant=tanh_constant,
            noise_std=noise_std,
            noise_samples=noise_samples,
        )
        self.grouper_noise = dict(
            temperature=1.0, tanh_constant=0.0, noise_std=noise_std, noise_samples=noise_samples
        )
        Exploration(**self.placer_exploration)  # fail on bad values at construction
        self.default_budget, self.num_threads = default_budget, num_threads

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        with torch_threads(self.num_threads):
            return self._train(tracker, seed)

    def _train(self, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        problem = tracker.problem
        ops = op_tensors(problem)
        g, d, n = problem.num_groups, problem.num_devices, ops.num_nodes
        n_groups = min(self.num_groups or default_num_groups(n, d), n)
        policy = seeded_module(
            lambda: GrouperPlacerPolicy(ops.x.shape[1], n_groups, d, self.hidden, self.grouping_hidden), seed
        )
        gen = make_generator(seed)
        assignment = np.asarray(problem.coarse.assignment)
        weights = np.asarray(problem.coarse.ops.nodes["flops"], dtype=np.float64) + 1.0
        grouper_noise, placer_exploration = (
            Exploration(**self.grouper_noise),
            Exploration(**self.placer_exploration),
        )
        used_groups: list[float] = []

        def sample(k: int) -> SampleBatch:
            op_devices, groups, logp, ent = policy(
                ops.x, ops.edge_index, k, gen, grouper_noise, placer_exploration
            )
            used_groups.append(float(len(torch.unique(groups))))
            return SampleBatch(vote(op_devices.numpy(), assignment, weights, g, d), logp, ent)

        budget = budget_of(tracker, self.default_budget)
        curve = reinforce(
            tracker,
            budget,
            sample,
            torch.optim.Adam(policy.parameters(), lr=self.lr),
            self.samples_per_update,
            reward=sqrt_runtime_reward(problem.baseline.latency, self.failing_ratio),
            baseline=MovingAverageBaseline(
                self.baseline_decay, normalize=False, init=-math.sqrt(self.failing_ratio), per_sample=True
            ),
            max_grad_norm=self.max_grad_norm,
        )
        for point, used in zip(curve, used_groups):
            point["groups_used"] = used
        return {**training_extras(curve, tracker, budget), "policy": policy, "num_groups": n_groups}
