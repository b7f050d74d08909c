"""Actor-critic policies with a per-node action head, for SB3 (PPO, A2C) and sb3-contrib (MaskablePPO).

SB3's default head is one dense layer from the features to ``sum(nvec)`` logits, which ties the network
to one graph size. Here the logits of group ``g`` come from a small MLP applied to
``[embedding of g, graph context]`` (weights shared by all groups), so one network serves graphs of any
size; the value comes from an MLP on the graph context. The features must come from a
:class:`~agents.sb3.extractors.GraphExtractor`.

* ``MultiDiscrete([D] * N)`` (one-shot): the ``(B, N, D)`` logits are flattened group-major to the
  ``(B, N * D)`` SB3's ``MultiCategoricalDistribution`` splits. Padding groups get a fixed logit row
  ``[0, -1e8, ...]`` so they always choose device 0 with probability 1: they add nothing to the log
  probability or the entropy.
* ``Discrete(D)`` (sequential): the logits of the current node, i.e. the head applied to the current
  node's embedding (the last third of the context).

Action masks (MaskablePPO) are applied by sb3-contrib on top of these logits. MultiDiscrete actions use
the vectorised distributions of :mod:`agents.sb3.distributions` (SB3's loop over groups is too slow for
hundreds of groups).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import Schedule
from torch import Tensor, nn

from agents.sb3.distributions import (
    BatchedMultiCategoricalDistribution,
    MaskableBatchedMultiCategoricalDistribution,
)
from agents.sb3.extractors import GCNExtractor, GraphExtractor, GraphFeatures, split_features
from placement_gym.errors import PlacementGymError

_PAD_LOGIT = -1e8  # as sb3-contrib's masking: finite, so entropies stay finite


def _mlp(in_dim: int, arch: list[int], activation: type[nn.Module]) -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = []
    for width in arch:
        layers += [nn.Linear(in_dim, width), activation()]
        in_dim = width
    return nn.Sequential(*layers), in_dim


class PerNodeHead(nn.Module):
    """Takes the place of SB3's ``mlp_extractor``: per-node logits for the actor, a latent for the critic.

    Its ``latent_pi`` is already the logits (the policy's ``action_net`` is the identity).

    Args:
        extractor: The graph extractor whose output this head reads.
        num_devices: ``D``.
        sequential: ``Discrete(D)`` action (logits of the current node) instead of ``MultiDiscrete``.
        pi_arch: Hidden widths of the per-node logit MLP.
        vf_arch: Hidden widths of the value MLP (its last width is ``latent_dim_vf``).
        activation: Activation module class.
    """

    def __init__(
        self,
        extractor: GraphExtractor,
        num_devices: int,
        sequential: bool,
        pi_arch: list[int],
        vf_arch: list[int],
        activation: type[nn.Module],
    ) -> None:
        super().__init__()
        self.num_devices, self.sequential = num_devices, sequential
        self.max_nodes, h = extractor.max_nodes, extractor.node_dim
        self.latent_node_dim = h
        self.pi_body, pi_out = _mlp(h + extractor.context_dim, pi_arch, activation)
        self.logits = nn.Linear(pi_out, num_devices)
        self.vf_body, self.latent_dim_vf = _mlp(extractor.context_dim, vf_arch, activation)
        self.latent_dim_pi = num_devices if sequential else self.max_nodes * num_devices

    def reset_parameters(self) -> None:
        """Orthogonal hidden layers (gain ``sqrt(2)``) and near-uniform initial logits (gain 0.01)."""
        for body in (self.pi_body, self.vf_body):
            for layer in body:
                if isinstance(layer, nn.Linear):
                    nn.init.orthogonal_(layer.weight, gain=math.sqrt(2))
                    nn.init.zeros_(layer.bias)
        nn.init.orthogonal_(self.logits.weight, gain=0.01)
        nn.init.zeros_(self.logits.bias)

    def split(self, features: Tensor) -> GraphFeatures:
        """Node embeddings, mask and context of the extractor's flat output."""
        return split_features(features, self.max_nodes, self.latent_node_dim)

    def node_logits(self, features: Tensor) -> Tensor:
        """Logits ``(B, N, D)`` of every group, padding rows fixed to ``[0, -1e8, ...]``."""
        parts = self.split(features)
        b, n, _ = parts.nodes.shape
        ctx = parts.context.unsqueeze(1).expand(b, n, parts.context.shape[-1])
        logits = self.logits(self.pi_body(torch.cat([parts.nodes, ctx], dim=-1)))  # (B, N, D)
        pad = torch.full_like(logits[0, 0], _PAD_LOGIT)
        pad[0] = 0.0
        return torch.where(parts.mask.unsqueeze(-1), logits, pad)

    def forward_actor(self, features: Tensor) -> Tensor:
        """Logits ``(B, N * D)`` (one-shot) or ``(B, D)`` (sequential)."""
        if self.sequential:
            parts = self.split(features)
            h = parts.nodes.shape[-1]
            current = parts.context[:, 2 * h :]  # (B, H): embedding of the current node
            return self.logits(self.pi_body(torch.cat([current, parts.context], dim=-1)))
        logits = self.node_logits(features)
        return logits.reshape(logits.shape[0], -1)

    def forward_critic(self, features: Tensor) -> Tensor:
        """Value latent ``(B, latent_dim_vf)`` from the graph context."""
        return self.vf_body(self.split(features).context)

    def forward(self, features: Tensor) -> tuple[Tensor, Tensor]:
        return self.forward_actor(features), self.forward_critic(features)


class _PerNodeMixin:
    """Shared construction of the GNN policies (mixed into SB3's and sb3-contrib's base classes)."""

    batched_distribution: type = BatchedMultiCategoricalDistribution

    def _init_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs.setdefault("features_extractor_class", GCNExtractor)
        kwargs.setdefault("activation_fn", nn.ReLU)
        # Initialisation is explicit (reset_parameters); SB3's would miss the PyG layers.
        kwargs["ortho_init"] = False
        return kwargs

    def _check_spaces(self, action_space: spaces.Space) -> None:
        if not issubclass(self.features_extractor_class, GraphExtractor):
            raise PlacementGymError(
                f"features_extractor_class must be a GraphExtractor, got {self.features_extractor_class.__name__}"
            )
        n, d = self.observation_space["placement"].shape
        if isinstance(action_space, spaces.Discrete):
            ok = action_space.n == d
        elif isinstance(action_space, spaces.MultiDiscrete):
            ok = action_space.nvec.shape == (n,) and bool((action_space.nvec == d).all())
        else:
            ok = False
        if not ok:
            raise PlacementGymError(
                f"action space {action_space} does not match the observation's {n} groups x {d} devices; "
                f"expected MultiDiscrete([{d}] * {n}) or Discrete({d})"
            )

    def _build_mlp_extractor(self) -> None:
        arch = (
            self.net_arch if isinstance(self.net_arch, dict) else {"pi": self.net_arch, "vf": self.net_arch}
        )
        extractor = (
            self.pi_features_extractor if not self.share_features_extractor else self.features_extractor
        )
        self.mlp_extractor = PerNodeHead(
            extractor,
            self.observation_space["placement"].shape[1],
            isinstance(self.action_space, spaces.Discrete),
            list(arch.get("pi", [])),
            list(arch.get("vf", [])),
            self.activation_fn,
        )

    def _build(self, lr_schedule: Schedule) -> None:
        self._check_spaces(self.action_space)
        if isinstance(self.action_space, spaces.MultiDiscrete):
            n, d = self.observation_space["placement"].shape
            self.action_dist = self.batched_distribution(n, d)
        self._build_mlp_extractor()
        self.action_net = nn.Identity()  # the head already outputs logits
        self.value_net = nn.Linear(self.mlp_extractor.latent_dim_vf, 1)
        self.mlp_extractor.reset_parameters()
        nn.init.orthogonal_(self.value_net.weight, gain=1.0)
        nn.init.zeros_(self.value_net.bias)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)


class GNNActorCriticPolicy(_PerNodeMixin, ActorCriticPolicy):
    """SB3 ``ActorCriticPolicy`` with a GNN extractor and a per-node action head (PPO, A2C).

    Args:
        observation_space: The env's ``Dict`` observation space.
        action_space: ``MultiDiscrete([D] * N)`` or ``Discrete(D)``.
        lr_schedule: Learning-rate schedule.
        net_arch: Hidden widths of the heads: a list (both) or ``{"pi": [...], "vf": [...]}``;
            default SB3's ``[64, 64]`` for both.
        **kwargs: Other ``ActorCriticPolicy`` arguments; ``features_extractor_class`` defaults to
            :class:`~agents.sb3.extractors.GCNExtractor`, ``activation_fn`` to ReLU; ``ortho_init`` is
            ignored (initialisation is explicit).

    Raises:
        PlacementGymError: If the extractor is not a ``GraphExtractor`` or the action space does not
            match the observation.
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(observation_space, action_space, lr_schedule, net_arch, **self._init_kwargs(kwargs))


class MaskableGNNActorCriticPolicy(_PerNodeMixin, MaskableActorCriticPolicy):
    """The same policy for sb3-contrib's ``MaskablePPO`` (masks from the env's ``action_masks()``).

    Arguments as :class:`GNNActorCriticPolicy`.
    """

    batched_distribution = MaskableBatchedMultiCategoricalDistribution

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(observation_space, action_space, lr_schedule, net_arch, **self._init_kwargs(kwargs))
