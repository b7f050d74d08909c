"""Batched multi-categorical distributions for ``MultiDiscrete([D] * N)`` actions.

SB3's ``MultiCategoricalDistribution`` (and sb3-contrib's masked one) build one ``Categorical`` per
action dimension; with ``N`` in the hundreds that Python loop dominates training time (on BERT's 267
groups, >80 % of a PPO update). When every dimension has the same ``D`` choices the same distribution is
one ``Categorical`` over ``(B, N, D)`` logits: these classes are drop-in replacements that do exactly that.
Actions are ``(B, N)``; log-probabilities and entropies are summed over the ``N`` groups.
"""

from __future__ import annotations

import numpy as np
import torch
from sb3_contrib.common.maskable.distributions import MaskableMultiCategoricalDistribution
from stable_baselines3.common.distributions import MultiCategoricalDistribution
from torch import Tensor
from torch.distributions import Categorical

_MASKED_LOGIT = -1e8  # as sb3-contrib: finite, so 0 * logit stays 0 in the entropy


class _BatchedCategorical:
    """Shared implementation: one ``Categorical`` on ``(B, N, D)`` logits."""

    num_groups: int
    num_choices: int
    dist: Categorical | None

    def _set_logits(self, logits: Tensor) -> None:
        self.dist = Categorical(logits=logits, validate_args=False)

    def proba_distribution(self, action_logits: Tensor):
        """Set the ``(B, N * D)`` group-major logits."""
        self._set_logits(action_logits.reshape(-1, self.num_groups, self.num_choices))
        return self

    def log_prob(self, actions: Tensor) -> Tensor:
        """``(B,)`` log-probability of ``(B, N)`` actions."""
        return self.dist.log_prob(actions.reshape(-1, self.num_groups).long()).sum(dim=1)

    def entropy(self) -> Tensor:
        """``(B,)`` entropy (sum over groups)."""
        return self.dist.entropy().sum(dim=1)

    def sample(self) -> Tensor:
        """``(B, N)`` sampled devices."""
        return self.dist.sample()

    def mode(self) -> Tensor:
        """``(B, N)`` most likely devices."""
        return torch.argmax(self.dist.logits, dim=-1)


class BatchedMultiCategoricalDistribution(_BatchedCategorical, MultiCategoricalDistribution):
    """``MultiCategoricalDistribution`` for ``N`` groups with ``D`` choices each, vectorised.

    Args:
        num_groups: ``N``.
        num_choices: ``D``.
    """

    def __init__(self, num_groups: int, num_choices: int) -> None:
        super().__init__([num_choices] * num_groups)
        self.num_groups, self.num_choices, self.dist = num_groups, num_choices, None


class MaskableBatchedMultiCategoricalDistribution(_BatchedCategorical, MaskableMultiCategoricalDistribution):
    """sb3-contrib's ``MaskableMultiCategoricalDistribution`` for ``N`` x ``D`` choices, vectorised.

    Masks are flat ``(B, N * D)`` booleans, group-major (the env's ``action_masks()`` layout); a masked
    device gets logit ``-1e8`` and is never sampled.

    Args:
        num_groups: ``N``.
        num_choices: ``D``.
    """

    def __init__(self, num_groups: int, num_choices: int) -> None:
        super().__init__([num_choices] * num_groups)
        self.num_groups, self.num_choices, self.dist = num_groups, num_choices, None
        self._raw_logits: Tensor | None = None

    def _set_logits(self, logits: Tensor) -> None:
        self._raw_logits = logits
        super()._set_logits(logits)

    def apply_masking(self, masks: np.ndarray | Tensor | None) -> None:
        """Mask devices (``None`` removes the mask)."""
        logits = self._raw_logits
        if masks is not None:
            mask = torch.as_tensor(masks, device=logits.device).reshape(logits.shape).bool()
            logits = torch.where(mask, logits, torch.full_like(logits, _MASKED_LOGIT))
        self.dist = Categorical(logits=logits, validate_args=False)
