"""A device-count-free GNN policy for the improvement MDP: one set of weights for any graph and platform.

The GNN policies of :mod:`agents.sb3.policy` read the placement one-hot and the device descriptors as
``D``-wide columns and output ``D`` logits per group, so their weights fit one device count. A
pretrained policy that transfers to any platform (GiPH, Hu et al., MLSys 2023: "a policy over
(task, device) pairs generalises across device networks") must not depend on ``D``. Here:

* every group's input is ``D``-free: its static features, the device-aware features of the device it is
  on now, the mean and minimum of its per-device features over the platform, and the transfer cost of its
  currently cut in- and out-edges (:class:`DeviceFreeExtractor`);
* GraphSAGE message passing (residual) gives each group an embedding ``h_g``, pooled into a context;
* a move set ``m`` (a group alone, or with ``moves=`` besides ``"single"`` a twin class, a segment, a
  fork-join branch: ``move_members``) is described by the mean over its groups of their embeddings and of
  their per-device features, the share of its groups on each device, and its kind;
* the logit of sending set ``m`` to device ``d`` is one MLP applied to ``[set embedding, context, kind,
  per-(set, d) features, descriptor of d, share of the set on d]``, shared by all pairs
  (:class:`PairScoringHead`); the value is an MLP of the context.

Only tensor shapes depend on ``N`` and ``D``, never a weight: a ``state_dict`` trained on one set of
spaces loads into the policy built for any other (:func:`transfer_weights`). The observation must be
that of :class:`~placement_gym.envs.DevicePlacementImproveEnv` (device-aware keys and ``placement``),
the action ``Discrete(M * D)``; it is used with sb3-contrib's ``MaskablePPO``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.type_aliases import Schedule
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv, global_max_pool, global_mean_pool

from agents.sb3.extractors import DEVICE_OBS_KEYS, OBS_KEYS, unpad
from placement_gym.errors import PlacementGymError

#: Keys the extractor reads: the graph extractors' keys and the device-aware ones.
KEYS = OBS_KEYS + DEVICE_OBS_KEYS
_PAD_LOGIT = -1e8  # as sb3-contrib's masking: finite, so entropies stay finite
_NDF, _DF = 3, 5  # per-(group, device) and per-device feature widths of the device-aware observation
_KINDS = 4  # move kinds: single, class, segment, branch (``move_kind``)


class DeviceFreeExtractor(BaseFeaturesExtractor):
    """GNN over the ``D``-free group inputs; passes the per-pair features through for the head.

    Output layout (flat, per sample), for the ``M`` move sets (``M = N``, the groups, without
    ``move_members``): set embeddings ``(M, H)``, set mask ``(M,)`` (1 for non-empty sets), context
    ``(C,)`` with ``C = 2H + K`` (mean and max pool, and the ``K`` entries of ``episode`` when the
    observation has it), set kinds ``(M, 4)``, per-(set, device) features ``(M, D, 3)``, device
    descriptors ``(D, 5)``, share of each set on each device ``(M, D)``.

    Args:
        observation_space: The improvement env's ``Dict`` observation space.
        hidden: Embedding width ``H``.
        layers: Message-passing layers.

    Raises:
        PlacementGymError: If a key of :data:`KEYS` is missing or ``hidden``/``layers`` are not positive.
    """

    def __init__(self, observation_space: spaces.Dict, hidden: int = 64, layers: int = 3) -> None:
        missing = [k for k in KEYS if k not in getattr(observation_space, "spaces", {})]
        if missing:
            raise PlacementGymError(
                f"observation space lacks {missing}; the device-free policy needs the improvement env's "
                "device-aware observation (DevicePlacementImproveEnv)"
            )
        if hidden < 1 or layers < 1:
            raise PlacementGymError(f"hidden={hidden} and layers={layers} must both be >= 1")
        n, f = observation_space["node_features"].shape
        d = observation_space["placement"].shape[1]
        k = observation_space["episode"].shape[0] if "episode" in observation_space.spaces else 0
        self.sets = "move_members" in observation_space.spaces
        m = observation_space["move_members"].shape[0] if self.sets else n
        context = 2 * hidden + k
        dim = m * hidden + m + context + m * _KINDS + m * d * (_NDF + 1) + d * _DF
        super().__init__(observation_space, features_dim=dim)
        self.max_nodes, self.num_moves, self.num_devices, self.hidden = n, m, d, hidden
        self.node_dim, self.context_dim, self.episode_dim = hidden, context, k
        self.input = nn.Linear(f + 2 * _NDF + _NDF + _DF + 2, hidden)
        self.convs = nn.ModuleList(SAGEConv(hidden, hidden) for _ in range(layers))
        self.act = nn.ReLU()
        nn.init.orthogonal_(self.input.weight, gain=math.sqrt(2))
        nn.init.zeros_(self.input.bias)
        for conv in self.convs:
            conv.reset_parameters()

    def group_inputs(self, obs: dict[str, Tensor]) -> Tensor:
        """``(B, N, F + 16)``: static features, the current device's per-group and device features, the
        mean and min of the per-device features, the cost of the cut in- and out-edges."""
        place = obs["placement"]  # (B, N, D)
        ndf = obs["node_device_features"]  # (B, N, D, 3)
        b, n, d = place.shape
        current = (place.unsqueeze(-1) * ndf).sum(2)  # (B, N, 3)
        device = place @ obs["device_features"]  # (B, N, 5)
        index = obs["edge_index"].long()  # (B, 2, E)
        src = torch.gather(place, 1, index[:, 0].unsqueeze(-1).expand(-1, -1, d))  # (B, E, D)
        dst = torch.gather(place, 1, index[:, 1].unsqueeze(-1).expand(-1, -1, d))  # (B, E, D)
        links = obs["edge_link_features"].reshape(b, -1, d, d)  # (B, E, D, D)
        cost = torch.einsum("bei,bej,beij->be", src, dst, links)  # (B, E): link each edge uses now
        cut = (1.0 - (src * dst).sum(-1)) * cost * obs["edge_mask"]  # (B, E), 0 when not cut or padding
        cut_in = torch.zeros(b, n, dtype=cut.dtype, device=cut.device).scatter_add_(1, index[:, 1], cut)
        cut_out = torch.zeros(b, n, dtype=cut.dtype, device=cut.device).scatter_add_(1, index[:, 0], cut)
        return torch.cat(
            [
                obs["node_features"],
                current,
                device,
                ndf.mean(2),
                ndf.amin(2),
                cut_in.unsqueeze(-1),
                cut_out.unsqueeze(-1),
            ],
            dim=-1,
        )

    def forward(self, obs: dict[str, Tensor]) -> Tensor:
        x = self.group_inputs(obs)
        b, n, _ = x.shape
        graph = unpad(
            {
                "node_features": x,
                "node_mask": obs["node_mask"],
                "edge_index": obs["edge_index"],
                "edge_features": obs["edge_features"],
                "edge_mask": obs["edge_mask"],
                "placement": x[..., :0],
                "current_node": torch.zeros_like(obs["node_mask"]),
            }
        )
        edge_index = torch.cat([graph.edge_index, graph.edge_index.flip(0)], dim=1)  # both directions
        # unpad's last column is the current-node flag (always 0 here)
        h = self.act(self.input(graph.x[:, :-1]))  # (V, H)
        for conv in self.convs:
            h = h + self.act(conv(h, edge_index))
        mask = obs["node_mask"] > 0.5  # (B, N)
        nodes = torch.zeros(b * n, self.hidden, dtype=h.dtype, device=h.device)
        nodes[mask.reshape(-1)] = h
        nodes = nodes.reshape(b, n, self.hidden)
        ndf, place = obs["node_device_features"], obs["placement"]
        if self.sets:  # mean over each set's members: a (B, M, N) averaging matrix
            members = obs["move_members"].long()  # (B, M, S), -1 padding
            valid = members >= 0
            index = torch.where(valid, members, torch.full_like(members, n))
            share = torch.zeros(b, members.shape[1], n + 1, dtype=h.dtype, device=h.device)
            share = share.scatter_add_(2, index, valid.to(h.dtype))[..., :n]  # (B, M, N)
            count = share.sum(-1, keepdim=True)  # (B, M, 1)
            share = share / count.clamp(min=1.0)
            set_mask, kinds = count.squeeze(-1) > 0, obs["move_kind"]
            nodes, place = share @ nodes, share @ place  # (B, M, H), (B, M, D)
            ndf = (share @ ndf.reshape(b, n, -1)).reshape(b, -1, self.num_devices, _NDF)  # (B, M, D, 3)
        else:
            set_mask = mask
            kinds = torch.zeros(b, n, _KINDS, dtype=h.dtype, device=h.device)
            kinds[..., 0] = mask.to(h.dtype)
        parts = [global_mean_pool(h, graph.batch, size=b), global_max_pool(h, graph.batch, size=b)]
        if self.episode_dim:
            parts.append(obs["episode"])
        return torch.cat(
            [
                nodes.reshape(b, -1),
                set_mask.to(h.dtype),
                *parts,
                kinds.reshape(b, -1),
                ndf.reshape(b, -1),
                obs["device_features"].reshape(b, -1),
                place.reshape(b, -1),
            ],
            dim=-1,
        )


def split_features(features: Tensor, n: int, d: int, h: int, c: int) -> tuple[Tensor, ...]:
    """:class:`DeviceFreeExtractor`'s flat output (``n`` sets, ``d`` devices, width ``h``, context ``c``)
    as set embeddings ``(B, n, h)``, set mask, context, kinds ``(B, n, K)``, per-pair features
    ``(B, n, d, F)``, device descriptors ``(B, d, F')`` and shares ``(B, n, d)``: its documented layout."""
    sizes = [n * h, n, c, n * _KINDS, n * d * _NDF, d * _DF, n * d]
    nodes, mask, ctx, kinds, ndf, df, place = torch.split(features, sizes, dim=1)
    b = features.shape[0]
    return (
        nodes.reshape(b, n, h),
        mask > 0.5,
        ctx,
        kinds.reshape(b, n, _KINDS),
        ndf.reshape(b, n, d, _NDF),
        df.reshape(b, d, _DF),
        place.reshape(b, n, d),
    )


class PairScoringHead(nn.Module):
    """Takes the place of SB3's ``mlp_extractor``: one logit per (group, device) pair, a value latent.

    Args:
        extractor: The :class:`DeviceFreeExtractor` whose output it reads.
        pi_arch: Hidden widths of the pair MLP.
        vf_arch: Hidden widths of the value MLP.
    """

    def __init__(self, extractor: DeviceFreeExtractor, pi_arch: list[int], vf_arch: list[int]) -> None:
        super().__init__()
        if not pi_arch:
            raise PlacementGymError("the pair MLP needs at least one hidden layer (net_arch pi=[...])")
        self.n, self.d, self.h = extractor.num_moves, extractor.num_devices, extractor.hidden
        self.c = extractor.context_dim
        # The first layer on [h_g, context, pair features] is split into a per-group part and a per-pair
        # part (the same linear map), so the wide group inputs are not repeated D times.
        self.group_in = nn.Linear(self.h + self.c + _KINDS, pi_arch[0])
        self.pair_in = nn.Linear(_NDF + _DF + 1, pi_arch[0], bias=False)
        self.pi_body, pi_out = _mlp(pi_arch[0], pi_arch[1:])
        self.logit = nn.Linear(pi_out, 1)
        self.vf_body, self.latent_dim_vf = _mlp(self.c, vf_arch)
        self.latent_dim_pi = self.n * self.d
        for layer in (self.group_in, self.pair_in, *self.pi_body, *self.vf_body):
            if isinstance(layer, nn.Linear):
                nn.init.orthogonal_(layer.weight, gain=math.sqrt(2))
                if layer.bias is not None:
                    nn.init.zeros_(layer.bias)
        nn.init.orthogonal_(self.logit.weight, gain=0.01)  # near-uniform initial policy
        nn.init.zeros_(self.logit.bias)

    def split(self, features: Tensor) -> tuple[Tensor, ...]:
        """Set embeddings, mask, context, kinds, per-pair features, device descriptors, shares."""
        return split_features(features, self.n, self.d, self.h, self.c)

    def forward_actor(self, features: Tensor) -> Tensor:
        """Logits ``(B, M * D)``, set-major (action ``m * D + d``); empty (padding) sets at -1e8."""
        nodes, mask, ctx, kinds, ndf, df, place = self.split(features)
        b, n, d = place.shape
        group = self.group_in(torch.cat([nodes, ctx.unsqueeze(1).expand(b, n, self.c), kinds], dim=-1))
        pair_inputs = [ndf, df.unsqueeze(1).expand(b, n, d, _DF), place.unsqueeze(-1)]
        pair = self.pair_in(torch.cat(pair_inputs, dim=-1))  # (B, N, D, W)
        hidden = torch.relu(group.unsqueeze(2) + pair)  # (B, M, D, W)
        logits = self.logit(self.pi_body(hidden)).squeeze(-1)  # (B, N, D)
        logits = torch.where(mask.unsqueeze(-1), logits, torch.full_like(logits, _PAD_LOGIT))
        return logits.reshape(b, n * d)

    def forward_critic(self, features: Tensor) -> Tensor:
        return self.vf_body(self.split(features)[2])

    def forward(self, features: Tensor) -> tuple[Tensor, Tensor]:
        return self.forward_actor(features), self.forward_critic(features)


def _mlp(in_dim: int, arch: list[int]) -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = []
    for width in arch:
        layers += [nn.Linear(in_dim, width), nn.ReLU()]
        in_dim = width
    return nn.Sequential(*layers), in_dim


class PairScoringPolicy(MaskableActorCriticPolicy):
    """sb3-contrib ``MaskableActorCriticPolicy`` with :class:`DeviceFreeExtractor` and
    :class:`PairScoringHead`; action ``Discrete(M * D)`` (send set ``a // D`` to device ``a % D``).

    Args:
        observation_space: The improvement env's ``Dict`` observation space.
        action_space: ``Discrete(M * D)``.
        lr_schedule: Learning-rate schedule.
        net_arch: Hidden widths of the heads: a list (both) or ``{"pi": [...], "vf": [...]}``.
        **kwargs: Other policy arguments (``features_extractor_kwargs``: ``hidden``, ``layers``).

    Raises:
        PlacementGymError: If the action space is not ``Discrete(M * D)`` for the observation.
    """

    #: The features extractor and the head (a subclass swaps both: the same spaces, checks and build).
    extractor_class: ClassVar[type[nn.Module]] = DeviceFreeExtractor
    head_class: ClassVar[type[nn.Module]] = PairScoringHead

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        **kwargs: Any,
    ) -> None:
        n, d = observation_space["placement"].shape
        if "move_members" in observation_space.spaces:
            n = observation_space["move_members"].shape[0]
        if not (isinstance(action_space, spaces.Discrete) and action_space.n == n * d):
            raise PlacementGymError(
                f"action space {action_space} is not Discrete({n} * {d}) (move set, device)"
            )
        kwargs["features_extractor_class"] = self.extractor_class
        kwargs["ortho_init"] = False  # initialisation is explicit
        super().__init__(observation_space, action_space, lr_schedule, net_arch or [64], **kwargs)

    def _build_mlp_extractor(self) -> None:
        arch = self.net_arch
        if not isinstance(arch, dict):
            arch = {"pi": arch, "vf": arch}
        self.mlp_extractor = self.head_class(self.features_extractor, list(arch["pi"]), list(arch["vf"]))

    def _build(self, lr_schedule: Schedule) -> None:
        self._build_mlp_extractor()
        self.action_net = nn.Identity()  # the head already outputs logits
        self.value_net = nn.Linear(self.mlp_extractor.latent_dim_vf, 1)
        nn.init.orthogonal_(self.value_net.weight, gain=1.0)
        nn.init.zeros_(self.value_net.bias)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)


def transfer_weights(state: dict[str, Tensor], target: nn.Module) -> None:
    """Load a policy's ``state_dict`` into ``target``, a policy of the same architecture built for other
    spaces (another graph size or device count).

    Raises:
        PlacementGymError: If a parameter is missing or its shape differs (another architecture).
    """
    try:
        target.load_state_dict(state)
    except RuntimeError as exc:
        text = " ".join(str(exc).split())[:300]
        raise PlacementGymError(f"the weights do not fit this architecture ({text})") from exc
