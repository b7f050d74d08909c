"""Actor-critic policies with a per-node action head, for SB3 (PPO, A2C) and sb3-contrib (MaskablePPO).

SB3's default head is one dense layer from the features to ``sum(nvec)`` logits, which ties the network
to one graph size. Here (:class:`PairScoringHead`) the logit of (group ``g``, device ``d``) is

    logit[g, d] = MLP([embedding of g, graph context])[d] + s * bias[g, d]

The MLP's weights are shared by all groups, so it serves graphs of any size and transfers. Shared
weights alone move every group's logits together (one gradient step that favours device ``d`` for one
group favours it for all groups with similar embeddings), and on one-step episodes the policy then
slides onto one device. The per-(group, device) bias (``pair_bias_scale=s > 0``, zero at the start, so
the initial policy is the MLP's) lets each pair move on its own; the scale ``s`` is its learning-rate
multiplier under Adam (docs/research-notes.md has the measurements). It is tied to the padding ``N`` (a policy with
``s = 0`` has no such parameter). The value comes from an MLP on the graph context. The features must
come from a :class:`~agents.sb3.extractors.GraphExtractor`.

* ``MultiDiscrete([D] * N)`` (one-shot): the ``(B, N, D)`` logits are flattened group-major to the
  ``(B, N * D)`` SB3's ``MultiCategoricalDistribution`` splits. Padding groups get a fixed logit row
  ``[0, -1e8, ...]`` so they always choose device 0 with probability 1: they add nothing to the log
  probability or the entropy.
* ``Discrete(D)`` (sequential): the logits of the current node, i.e. the head applied to the current
  node's embedding (the last third of the context); the pair bias is not used.
* ``Discrete(N * D)`` (improvement moves, ``DevicePlacementImproveEnv``): action ``g * D + d`` moves group
  ``g`` to device ``d``; the ``(B, N, D)`` logits flattened group-major, padding groups at ``-1e8``.
  With multi-group move sets (``Discrete(M * D)``, the observation's ``move_members``), set ``s >= N``
  scores the mean of its members' pair logits plus a scaled per-(set, device) bias.

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
from agents.sb3.extractors import (
    GCNExtractor,
    GraphExtractor,
    GraphFeatures,
    extractor_class,
    split_features,
    split_moves,
)
from placement_gym.errors import PlacementGymError

_PAD_LOGIT = -1e8  # as sb3-contrib's masking: finite, so entropies stay finite


def _mlp(in_dim: int, arch: list[int], activation: type[nn.Module]) -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = []
    for width in arch:
        layers += [nn.Linear(in_dim, width), activation()]
        in_dim = width
    return nn.Sequential(*layers), in_dim


#: Action kinds of :class:`PairScoringHead`.
ACTION_KINDS = ("placement", "current", "move")


class PairScoringHead(nn.Module):
    """Takes the place of SB3's ``mlp_extractor``: per-(group, device) logits for the actor, a latent for
    the critic.

    Its ``latent_pi`` is already the logits (the policy's ``action_net`` is the identity).

    Args:
        extractor: The graph extractor whose output this head reads.
        num_devices: ``D``.
        action: ``"placement"`` (``MultiDiscrete([D] * N)``: ``(B, N * D)`` logits), ``"current"``
            (``Discrete(D)``: the current group's logits) or ``"move"`` (``Discrete(N * D)``: the same
            ``(B, N * D)`` logits as one categorical).
        pi_arch: Hidden widths of the per-node logit MLP.
        vf_arch: Hidden widths of the value MLP (its last width is ``latent_dim_vf``).
        activation: Activation module class.
        pair_bias_scale: ``s``: scale of the per-(group, device) bias (0: no bias).

    Raises:
        PlacementGymError: If ``action`` is unknown or ``pair_bias_scale`` is negative.
    """

    def __init__(
        self,
        extractor: GraphExtractor,
        num_devices: int,
        action: str,
        pi_arch: list[int],
        vf_arch: list[int],
        activation: type[nn.Module],
        pair_bias_scale: float = 0.0,
    ) -> None:
        super().__init__()
        if action not in ACTION_KINDS:
            raise PlacementGymError(f"action={action!r} is not one of {ACTION_KINDS}")
        if not pair_bias_scale >= 0:
            raise PlacementGymError(f"pair_bias_scale={pair_bias_scale} must be >= 0")
        self.num_devices, self.action = num_devices, action
        self.sequential = action == "current"
        self.max_nodes, h = extractor.max_nodes, extractor.node_dim
        self.latent_node_dim = h
        self.pi_body, pi_out = _mlp(h + extractor.context_dim, pi_arch, activation)
        self.logits = nn.Linear(pi_out, num_devices)
        self.pair_bias_scale = float(pair_bias_scale)
        if self.pair_bias_scale > 0:
            self.pair_bias = nn.Parameter(torch.zeros(self.max_nodes, num_devices))  # (N, D)
        self.vf_body, self.latent_dim_vf = _mlp(extractor.context_dim, vf_arch, activation)
        self.latent_dim_pi = num_devices if self.sequential else self.max_nodes * num_devices
        #: ``(M, S)`` move sets of the improvement env (``move`` actions over sets), else ``None``.
        self.move_shape = getattr(extractor, "move_shape", None) if action == "move" else None
        if self.move_shape is not None:
            self.latent_dim_pi = self.move_shape[0] * num_devices
            if self.pair_bias_scale > 0:  # one bias per (set, device) for the sets past the N singles
                self.set_bias = nn.Parameter(torch.zeros(self.move_shape[0] - self.max_nodes, num_devices))

    def reset_parameters(self) -> None:
        """Orthogonal hidden layers (gain ``sqrt(2)``) and near-uniform initial logits (gain 0.01)."""
        for body in (self.pi_body, self.vf_body):
            for layer in body:
                if isinstance(layer, nn.Linear):
                    nn.init.orthogonal_(layer.weight, gain=math.sqrt(2))
                    nn.init.zeros_(layer.bias)
        nn.init.orthogonal_(self.logits.weight, gain=0.01)
        nn.init.zeros_(self.logits.bias)
        if self.pair_bias_scale > 0:
            nn.init.zeros_(self.pair_bias)
            if self.move_shape is not None:
                nn.init.zeros_(self.set_bias)

    def split(self, features: Tensor) -> GraphFeatures:
        """Node embeddings, mask and context of the extractor's flat output."""
        return split_features(features, self.max_nodes, self.latent_node_dim)

    def node_logits(self, features: Tensor) -> Tensor:
        """Logits ``(B, N, D)`` of every group; padding rows are ``[0, -1e8, ...]`` (placement: always
        device 0) or all ``-1e8`` (moves: never chosen)."""
        parts = self.split(features)
        b, n, _ = parts.nodes.shape
        ctx = parts.context.unsqueeze(1).expand(b, n, parts.context.shape[-1])
        logits = self.logits(self.pi_body(torch.cat([parts.nodes, ctx], dim=-1)))  # (B, N, D)
        if self.pair_bias_scale > 0:
            logits = logits + self.pair_bias_scale * self.pair_bias
        pad = torch.full_like(logits[0, 0], _PAD_LOGIT)
        if self.action == "placement":
            pad[0] = 0.0
        return torch.where(parts.mask.unsqueeze(-1), logits, pad)

    def forward_actor(self, features: Tensor) -> Tensor:
        """Logits ``(B, N * D)`` (placement, move) or ``(B, D)`` (current)."""
        if self.sequential:
            parts = self.split(features)
            h = parts.nodes.shape[-1]
            current = parts.context[:, 2 * h :]  # (B, H): embedding of the current node
            return self.logits(self.pi_body(torch.cat([current, parts.context], dim=-1)))
        logits = self.node_logits(features)
        if self.move_shape is not None:
            logits = torch.cat([logits, self.set_logits(features, logits)], dim=1)  # (B, M, D)
        return logits.reshape(logits.shape[0], -1)

    def set_logits(self, features: Tensor, pair_logits: Tensor) -> Tensor:
        """``(B, M - N, D)`` logits of the multi-group move sets: the mean of their members' pair logits
        (plus the scaled per-(set, device) bias); sets without members (padding) at ``-1e8``."""
        members = split_moves(features, self.max_nodes, self.latent_node_dim, self.move_shape)
        members = members[:, self.max_nodes :]
        b, m, size = members.shape  # (B, M - N, S)
        valid = members >= 0
        index = members.clamp(min=0).reshape(b, m * size, 1).expand(-1, -1, self.num_devices)
        gathered = torch.gather(pair_logits, 1, index).reshape(b, m, size, self.num_devices)
        count = valid.sum(-1, keepdim=True)  # (B, M - N, 1)
        mean = (gathered * valid.unsqueeze(-1)).sum(2) / count.clamp(min=1)
        if self.pair_bias_scale > 0:
            mean = mean + self.pair_bias_scale * self.set_bias
        return torch.where(count > 0, mean, torch.full_like(mean, _PAD_LOGIT))

    def forward_critic(self, features: Tensor) -> Tensor:
        """Value latent ``(B, latent_dim_vf)`` from the graph context."""
        return self.vf_body(self.split(features).context)

    def forward(self, features: Tensor) -> tuple[Tensor, Tensor]:
        return self.forward_actor(features), self.forward_critic(features)


class _PerNodeMixin:
    """Shared construction of the GNN policies (mixed into SB3's and sb3-contrib's base classes)."""

    batched_distribution: type = BatchedMultiCategoricalDistribution

    pair_bias_scale: float = 0.0

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "pair_bias_scale": self.pair_bias_scale}

    def _init_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        gnn = kwargs.pop("gnn", None)
        if gnn is not None:  # a name, for YAML configs (rl-zoo3) that cannot hold a class
            if "features_extractor_class" in kwargs:
                raise PlacementGymError("pass either gnn or features_extractor_class, not both")
            kwargs["features_extractor_class"] = extractor_class(gnn)
        kwargs.setdefault("features_extractor_class", GCNExtractor)
        kwargs.setdefault("activation_fn", nn.ReLU)
        # Initialisation is explicit (reset_parameters); SB3's would miss the PyG layers.
        kwargs["ortho_init"] = False
        return kwargs

    def _action_kind(self, action_space: spaces.Space) -> str:
        """``"placement"``, ``"current"`` or ``"move"`` (see :class:`PairScoringHead`)."""
        if not issubclass(self.features_extractor_class, GraphExtractor):
            raise PlacementGymError(
                f"features_extractor_class must be a GraphExtractor, got {self.features_extractor_class.__name__}"
            )
        n, d = self.observation_space["placement"].shape
        if isinstance(action_space, spaces.Discrete) and action_space.n == d:
            return "current"
        if isinstance(action_space, spaces.Discrete) and action_space.n == n * d:
            return "move"
        moves = self.observation_space.spaces.get("move_members")
        if isinstance(action_space, spaces.Discrete) and moves is not None:
            if action_space.n == moves.shape[0] * d:
                return "move"
        if (
            isinstance(action_space, spaces.MultiDiscrete)
            and action_space.nvec.shape == (n,)
            and bool((action_space.nvec == d).all())
        ):
            return "placement"
        raise PlacementGymError(
            f"action space {action_space} does not match the observation's {n} groups x {d} devices; "
            f"expected MultiDiscrete([{d}] * {n}), Discrete({d}) or Discrete({n * d})"
        )

    def _build_mlp_extractor(self) -> None:
        arch = (
            self.net_arch if isinstance(self.net_arch, dict) else {"pi": self.net_arch, "vf": self.net_arch}
        )
        extractor = (
            self.pi_features_extractor if not self.share_features_extractor else self.features_extractor
        )
        self.mlp_extractor = PairScoringHead(
            extractor,
            self.observation_space["placement"].shape[1],
            self._action_kind(self.action_space),
            list(arch.get("pi", [])),
            list(arch.get("vf", [])),
            self.activation_fn,
            self.pair_bias_scale,
        )

    def _build(self, lr_schedule: Schedule) -> None:
        self._action_kind(self.action_space)
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
        action_space: ``MultiDiscrete([D] * N)``, ``Discrete(D)`` or ``Discrete(N * D)``.
        lr_schedule: Learning-rate schedule.
        net_arch: Hidden widths of the heads: a list (both) or ``{"pi": [...], "vf": [...]}``;
            default SB3's ``[64, 64]`` for both.
        pair_bias_scale: Scale ``s`` of the per-(group, device) logit bias (0: none); see
            :class:`PairScoringHead`.
        **kwargs: Other ``ActorCriticPolicy`` arguments; ``gnn`` (``"gcn"``, ``"gat"``, ``"sage"``) names
            the extractor instead of ``features_extractor_class``, which defaults to
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
        pair_bias_scale: float = 0.0,
        **kwargs: Any,
    ) -> None:
        self.pair_bias_scale = float(pair_bias_scale)
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
        pair_bias_scale: float = 0.0,
        **kwargs: Any,
    ) -> None:
        self.pair_bias_scale = float(pair_bias_scale)
        super().__init__(observation_space, action_space, lr_schedule, net_arch, **self._init_kwargs(kwargs))
