"""Hierarchical grouper-placer (Mirhoseini et al., ICLR 2018; Liu et al., HP3C 2019).

Papers: A. Mirhoseini, A. Goldie, H. Pham, B. Steiner, Q. V. Le, J. Dean. "A Hierarchical Model for Device
Placement." ICLR 2018. Liu et al., HP3C 2019 (fully-connected grouper on op information).

A feed-forward grouper reads every op of the env's op graph (``env.coarse.ops``) and samples one of
``G'`` groups for it (default ``min(256, 20 x D)``, capped by the op count). Each group is embedded from
its ops (mean op features and size) and a sequence-to-sequence placer (the LSTM encoder / attentional
decoder of :mod:`agents.systems.rl_placement`) samples a device per group. Grouper and placer are trained
jointly by REINFORCE on the joint log-probability of all op-to-group and group-to-device choices.

Deviations from the papers:

* The env places its own groups (fused layers by default), not single ops. Ops of one env group may be
  sent to different devices by the grouper; the env group then goes to the device holding most of its
  FLOPs (``flops + 1`` weighted vote, ties to the lower device index). This mapping is a deterministic
  function of the sampled choices, so the policy gradient stays unbiased.
* Reward: the env's reward (speedup over the best single device minus 1, infeasible -1) rather than the
  negative square root of the measured step time.
* Group embeddings: mean of the env's op features (op-type mix, FLOPs, bytes, degree, topological
  position) plus the group's size; the ICLR 2018 embedding also has inter-group adjacency.
* Device memory masks are not applied (the grouper does not see env groups); an over-full device is
  reported infeasible by the backend and rewarded as such.
* Advantages are divided by the batch's reward std; gradients are clipped; Adam.
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
)
from agents.systems.rl_placement import Seq2SeqPlacer


def default_num_groups(num_ops: int, num_devices: int) -> int:
    """TensorFlow's default ``min(256, 20 x devices)``, capped by the number of ops."""
    return max(1, min(256, 20 * num_devices, num_ops))


class GrouperPlacerPolicy(nn.Module):
    """Feed-forward grouper over ops and seq2seq placer over groups.

    Args:
        op_dim: Op feature size ``F``.
        num_groups: ``G'``.
        num_devices: ``D``.
        hidden: Width ``H``.
    """

    def __init__(self, op_dim: int, num_groups: int, num_devices: int, hidden: int = 64) -> None:
        super().__init__()
        self.num_groups = num_groups
        self.grouper = nn.Sequential(nn.Linear(op_dim, hidden), nn.ReLU(), nn.Linear(hidden, num_groups))
        self.placer = Seq2SeqPlacer(op_dim + 1, hidden, num_devices)

    def forward(
        self, x: torch.Tensor, k: int, generator: torch.Generator, greedy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample ``k`` groupings and group placements.

        Args:
            x: ``(n, F)`` op features.
            k: Samples.
            generator: Sampling randomness.
            greedy: Argmax choices.

        Returns:
            ``(op_devices (k, n) int64, groups (k, n) int64, log_prob (k,), entropy (k,))``.
        """
        n = x.shape[0]
        logits = self.grouper(x).unsqueeze(0).expand(k, -1, -1)  # (k, n, G')
        groups, g_logp, g_ent = sample_categorical(logits, generator, greedy=greedy)  # (k, n)
        onehot = F.one_hot(groups, self.num_groups).float()  # (k, n, G')
        sizes = onehot.sum(1).unsqueeze(-1)  # (k, G', 1)
        feats = torch.bmm(onehot.transpose(1, 2), x.expand(k, -1, -1)) / sizes.clamp(min=1)  # (k, G', F)
        items = torch.cat([feats, torch.log1p(sizes) / math.log1p(n)], dim=-1)
        devices, p_logp, p_ent = self.placer(items, generator, greedy=greedy)  # (k, G')
        op_devices = devices.gather(1, groups)
        return op_devices, groups, g_logp.sum(1) + p_logp, g_ent.sum(1) + p_ent


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
        samples_per_update: Placements sampled (and evaluated) per update.
        hidden: Width of grouper and placer.
        lr: Adam learning rate.
        baseline_decay: Moving-average baseline decay.
        entropy_coef: Entropy bonus weight.
        default_budget: Evaluations when ``place`` gets ``budget=None``.
        num_threads: Torch intra-op threads while placing.
    """

    name = "grouper_placer"

    def __init__(
        self,
        num_groups: int | None = None,
        samples_per_update: int = 20,
        hidden: int = 64,
        lr: float = 1e-2,
        baseline_decay: float = 0.9,
        entropy_coef: float = 0.0,
        default_budget: int = DEFAULT_BUDGET,
        num_threads: int = 1,
    ) -> None:
        if num_groups is not None and num_groups < 1:
            raise ValueError(f"num_groups must be >= 1, got {num_groups}")
        self.num_groups, self.samples_per_update, self.hidden, self.lr = (
            num_groups,
            samples_per_update,
            hidden,
            lr,
        )
        self.baseline_decay, self.entropy_coef = baseline_decay, entropy_coef
        self.default_budget, self.num_threads = default_budget, num_threads

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        with torch_threads(self.num_threads):
            return self._train(env, tracker, seed)

    def _train(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        inner = tracker.problem
        ops = op_tensors(tracker.problem)
        g, d, n = inner.num_groups, inner.num_devices, ops.num_nodes
        n_groups = min(self.num_groups or default_num_groups(n, d), n)
        policy = seeded_module(lambda: GrouperPlacerPolicy(ops.x.shape[1], n_groups, d, self.hidden), seed)
        gen = make_generator(seed)
        assignment = np.asarray(inner.coarse.assignment)
        weights = np.asarray(inner.coarse.ops.nodes["flops"], dtype=np.float64) + 1.0
        used_groups: list[float] = []

        def sample(k: int) -> SampleBatch:
            op_devices, groups, logp, ent = policy(ops.x, k, gen)
            used_groups.append(float(np.mean([len(np.unique(row)) for row in groups.numpy()])))
            return SampleBatch(vote(op_devices.numpy(), assignment, weights, g, d), logp, ent)

        curve = reinforce(
            tracker,
            budget_of(tracker, self.default_budget),
            sample,
            torch.optim.Adam(policy.parameters(), lr=self.lr),
            self.samples_per_update,
            baseline=MovingAverageBaseline(self.baseline_decay),
            entropy_coef=self.entropy_coef,
        )
        for point, used in zip(curve, used_groups):
            point["groups_used"] = used
        return {"curve": curve, "policy": policy, "num_groups": n_groups}
