"""GNN feature extractors for Stable-Baselines3 on the device-placement observation.

The env's observation is a ``Dict`` of padded arrays (see
:class:`~placement_gym.envs.device_placement.DevicePlacementEnv`); SB3 stacks ``B`` of them. A
:class:`GraphExtractor` un-pads the batch into one PyG graph batch without a Python loop over samples,
runs a GNN over ``[node features, placement one-hot, current-node flag]`` and returns, flattened,
everything a per-node policy head needs:

====================  ==========  =====================================================================
part                  shape       meaning
====================  ==========  =====================================================================
node embeddings       ``(N, H)``  one row per (padded) group, zeros for padding
node mask             ``(N,)``    1 for real groups
context               ``(3H,)``   ``[masked mean, masked max, embedding of the current node]``
====================  ==========  =====================================================================

so ``features_dim = N * H + N + 3 * H`` (plus ``M * S``: the improvement env's move-set members, passed
through when the observation has ``move_members``). :meth:`GraphExtractor.split` recovers the parts; the current
node's embedding is zero in one-shot mode, where no node is current. The network's parameters do not
depend on ``N``: the same weights serve graphs of any size (``N`` is only the padding of the spaces).

Subclasses choose the message-passing layer, as in PyG's ``basic_gnn.py``: :class:`GCNExtractor`,
:class:`GATExtractor` (GATv2), :class:`SAGEExtractor`. Edges are used in both directions by default (a
group's placement depends on its producers and its consumers). With device-aware observations
(``observation="device"``) the per-(group, device) features and the device descriptors join each node's
input and the per-link transfer times join each edge's features.

Message passing cannot tell apart groups whose neighbourhoods look alike (Inception-V3's parallel
branches, BERT's repeated layers), so the policy could not place them differently. ``positional=P``
appends ``P`` sinusoidal features of each group's index (the env numbers groups in topological order),
periods ``4, 8, ..., 4 * 2^(P/2 - 1)``, as the Transformer's positional encoding
(Vaswani et al., 2017): every group gets a distinct input.

Example::

    from stable_baselines3 import PPO
    from agents.sb3.extractors import GATExtractor
    from agents.sb3.policy import GNNActorCriticPolicy

    model = PPO(GNNActorCriticPolicy, env,
                policy_kwargs=dict(features_extractor_class=GATExtractor,
                                   features_extractor_kwargs=dict(hidden=64, layers=3)))
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import Tensor, nn
from torch_geometric.nn import (
    GATv2Conv,
    GCNConv,
    SAGEConv,
    global_add_pool,
    global_max_pool,
    global_mean_pool,
)
from torch_geometric.utils import to_dense_batch

from placement_gym.errors import PlacementGymError, UnknownNameError

#: Keys the extractor needs in the observation.
OBS_KEYS = (
    "node_features",
    "node_mask",
    "edge_index",
    "edge_features",
    "edge_mask",
    "placement",
)
#: Optional keys: the current-node flag (sequential mode; zeros when absent) and the improvement env's
#: ``(3,)`` episode progress (appended to every node's input when present).
OPTIONAL_OBS_KEYS = ("current_node", "episode")
#: Device-aware keys (``observation="device"``), used when the observation space has them.
DEVICE_OBS_KEYS = ("node_device_features", "edge_link_features", "device_features")


class GraphBatch(NamedTuple):
    """A batch of ``B`` padded graphs as one PyG-style graph of ``V`` real nodes and ``M`` real edges.

    Attributes:
        x: ``(V, F + D + 1)`` node inputs: static features, placement one-hot, current-node flag (and,
            with device-aware observations, each node's per-device features and the device descriptors:
            ``F + D + 1 + 3D + 5D`` columns).
        edge_index: ``(2, M)`` int64 indices into ``x``.
        edge_attr: ``(M, 1)`` edge features (``(M, 1 + D^2)`` with the per-link transfer times).
        batch: ``(V,)`` int64 sample index of each node.
        current: ``(V,)`` current-node flag of each node.
    """

    x: Tensor
    edge_index: Tensor
    edge_attr: Tensor
    batch: Tensor
    current: Tensor


class GraphFeatures(NamedTuple):
    """The parts of a :class:`GraphExtractor`'s flat output.

    Attributes:
        nodes: ``(B, N, H)`` node embeddings, zeros for padding.
        mask: ``(B, N)`` bool, True for real groups.
        context: ``(B, 3H)`` graph context: masked mean, masked max, current node's embedding.
    """

    nodes: Tensor
    mask: Tensor
    context: Tensor


def split_features(features: Tensor, max_nodes: int, hidden: int) -> GraphFeatures:
    """Split a ``(B, N * H + N + 3H)`` extractor output into node embeddings, mask and context.

    Args:
        features: The flat features.
        max_nodes: ``N``.
        hidden: ``H``.
    """
    n, h = max_nodes, hidden
    b = features.shape[0]
    nodes = features[:, : n * h].reshape(b, n, h)  # (B, N, H)
    mask = features[:, n * h : n * h + n] > 0.5  # (B, N)
    return GraphFeatures(nodes, mask, features[:, n * h + n : n * h + n + 3 * h])


def split_moves(features: Tensor, max_nodes: int, hidden: int, move_shape: tuple[int, int]) -> Tensor:
    """The ``(B, M, S)`` int64 move-set members (-1: padding) after the graph parts of ``features``."""
    start = max_nodes * hidden + max_nodes + 3 * hidden
    return features[:, start:].round().long().reshape(features.shape[0], *move_shape)


def positional_table(max_nodes: int, size: int) -> Tensor:
    """``(N, P)`` sinusoidal features of the group index: ``sin`` and ``cos`` of ``2 pi g / (4 * 2^k)``."""
    index = torch.arange(max_nodes, dtype=torch.float32).unsqueeze(1)  # (N, 1)
    periods = 4.0 * 2.0 ** torch.arange(size // 2, dtype=torch.float32)  # (P/2,)
    angle = 2 * math.pi * index / periods  # (N, P/2)
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)  # (N, P)


def unpad(obs: dict[str, Tensor], positions: Tensor | None = None) -> GraphBatch:
    """Turn a batch of padded observations into one graph batch, vectorised over samples.

    Real nodes keep their order (sample-major, then node index), exactly as
    ``torch_geometric.data.Batch.from_data_list`` lays them out; edge indices are shifted by each
    sample's node offset and padding edges (``edge_mask == 0``) are dropped.

    Args:
        obs: The env's observation keys with a leading batch dimension ``B`` (``edge_index`` may be
            float, as SB3's preprocessing makes every ``Box`` float).
        positions: ``(N, P)`` positional features appended to every sample's node inputs, or ``None``.

    Returns:
        The graph batch.
    """
    node_mask = obs["node_mask"] > 0.5  # (B, N)
    b, n = node_mask.shape
    current = obs["current_node"] if "current_node" in obs else torch.zeros_like(obs["node_mask"])  # (B, N)
    parts = [obs["node_features"], obs["placement"], current.unsqueeze(-1)]  # (B, N, F + D + 1)
    edge_features = obs["edge_features"]  # (B, E, 1)
    if "node_device_features" in obs:  # device-aware observation: per-device columns on every node
        parts.append(obs["node_device_features"].reshape(b, n, -1))  # (B, N, 3D)
        parts.append(obs["device_features"].reshape(b, 1, -1).expand(b, n, -1))  # (B, N, 5D)
        edge_features = torch.cat([edge_features, obs["edge_link_features"]], dim=-1)  # (B, E, 1 + D^2)
    if "episode" in obs:  # improvement env: the episode's progress, the same on every node
        parts.append(obs["episode"].reshape(b, 1, -1).expand(b, n, -1))  # (B, N, 3)
    if positions is not None:
        parts.append(positions.unsqueeze(0).expand(b, n, -1))  # (B, N, P)
    x_dense = torch.cat(parts, dim=-1)
    flat_mask = node_mask.reshape(-1)  # (B * N,)
    # New index of every padded slot: the number of real nodes before it (valid only for real nodes).
    new_index = torch.cumsum(flat_mask.long(), 0) - 1  # (B * N,)
    offsets = torch.arange(b, device=node_mask.device).unsqueeze(1) * n  # (B, 1)
    edge_index = obs["edge_index"].long()  # (B, 2, E)
    edge_mask = obs["edge_mask"] > 0.5  # (B, E)
    src = (edge_index[:, 0] + offsets)[edge_mask]  # (M,)
    dst = (edge_index[:, 1] + offsets)[edge_mask]  # (M,)
    batch = torch.arange(b, device=node_mask.device).repeat_interleave(n)[flat_mask]  # (V,)
    return GraphBatch(
        x=x_dense.reshape(b * n, -1)[flat_mask],
        edge_index=torch.stack([new_index[src], new_index[dst]]),
        edge_attr=edge_features[edge_mask],
        batch=batch,
        current=current.reshape(-1)[flat_mask],
    )


class GraphExtractor(BaseFeaturesExtractor):
    """Base class: un-pad, embed, message-pass with residual connections, pool, flatten.

    Subclasses implement :meth:`init_conv` (and :meth:`conv_kwargs` if their layer reads edge
    features), like PyG's ``BasicGNN``.

    Args:
        observation_space: The env's ``Dict`` observation space.
        hidden: Embedding width ``H``.
        layers: Number of message-passing layers.
        bidirectional: Also pass messages from consumers to producers (reversed edges).
        activation: Activation module class.
        positional: Sinusoidal features of the group index appended to every node's input (an even
            number, 0 for none).

    Raises:
        PlacementGymError: If the observation space lacks a key of :data:`OBS_KEYS`,
            ``hidden``/``layers`` are not positive or ``positional`` is odd or negative.
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        hidden: int = 64,
        layers: int = 3,
        bidirectional: bool = True,
        activation: type[nn.Module] = nn.ReLU,
        positional: int = 0,
    ) -> None:
        missing = [k for k in OBS_KEYS if k not in getattr(observation_space, "spaces", {})]
        if missing:
            raise PlacementGymError(
                f"observation space lacks {missing}; GraphExtractor needs a DevicePlacementEnv observation"
            )
        if hidden < 1 or layers < 1:
            raise PlacementGymError(f"hidden={hidden} and layers={layers} must both be >= 1")
        if positional < 0 or positional % 2:
            raise PlacementGymError(f"positional={positional} must be an even number >= 0")
        n, f = observation_space["node_features"].shape
        d = observation_space["placement"].shape[1]
        #: ``(M, S)`` of the improvement env's move sets (``move_members``), passed through; else ``None``.
        self.move_shape = (
            tuple(observation_space["move_members"].shape) if "move_members" in observation_space.spaces else None
        )
        moves_dim = int(np.prod(self.move_shape)) if self.move_shape else 0
        super().__init__(observation_space, features_dim=n * hidden + n + 3 * hidden + moves_dim)
        self.max_nodes, self.num_devices, self.hidden = n, d, hidden
        self.node_dim, self.context_dim = hidden, 3 * hidden
        self.bidirectional = bidirectional
        self.device_aware = all(k in observation_space.spaces for k in DEVICE_OBS_KEYS)
        in_dim, self.edge_dim = f + d + 1 + positional, 1
        self.positional = positional
        self.register_buffer("position_table", positional_table(n, positional), persistent=False)
        if self.device_aware:
            in_dim += int(np.prod(observation_space["node_device_features"].shape[1:]))
            in_dim += int(np.prod(observation_space["device_features"].shape))
            self.edge_dim += observation_space["edge_link_features"].shape[1]
        if "episode" in observation_space.spaces:
            in_dim += int(np.prod(observation_space["episode"].shape))
        self.input = nn.Linear(in_dim, hidden)
        self.convs = nn.ModuleList(self.init_conv(hidden, hidden) for _ in range(layers))
        self.act = activation()
        self.reset_parameters()

    def init_conv(self, in_channels: int, out_channels: int) -> nn.Module:
        """Build one message-passing layer."""
        raise NotImplementedError

    def conv_kwargs(self, edge_attr: Tensor) -> dict[str, Tensor]:
        """Extra arguments of a layer's ``forward`` built from the ``(M, edge_dim)`` edge features."""
        return {}

    def reset_parameters(self) -> None:
        """Explicit initialisation (SB3's orthogonal init only reaches ``torch.nn.Linear``).

        The input projection is orthogonal with gain ``sqrt(2)`` (ReLU), the layers use PyG's own
        ``reset_parameters`` (Glorot weights, zero biases).
        """
        nn.init.orthogonal_(self.input.weight, gain=math.sqrt(2))
        nn.init.zeros_(self.input.bias)
        for conv in self.convs:
            conv.reset_parameters()

    def encode(self, graph: GraphBatch) -> Tensor:
        """Node embeddings ``(V, H)`` of an un-padded graph batch."""
        edge_index, edge_attr = graph.edge_index, graph.edge_attr
        if self.bidirectional:
            edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)  # (2, 2M)
            edge_attr = torch.cat([edge_attr, edge_attr], dim=0)  # (2M, 1)
        kwargs = self.conv_kwargs(edge_attr)
        h = self.act(self.input(graph.x))
        for conv in self.convs:
            h = h + self.act(conv(h, edge_index, **kwargs))
        return h

    def forward(self, observations: dict[str, Tensor]) -> Tensor:
        """Flat features ``(B, N * H + N + 3H)``; see the module docstring for the layout."""
        graph = unpad(observations, self.position_table if self.positional else None)
        b = observations["node_mask"].shape[0]
        h = self.encode(graph)  # (V, H)
        context = torch.cat(
            [
                global_mean_pool(h, graph.batch, size=b),
                global_max_pool(h, graph.batch, size=b),
                global_add_pool(h * graph.current.unsqueeze(-1), graph.batch, size=b),
            ],
            dim=-1,
        )  # (B, 3H)
        nodes, mask = to_dense_batch(h, graph.batch, max_num_nodes=self.max_nodes, batch_size=b)
        parts = [nodes.reshape(b, -1), mask.to(h.dtype), context]
        if self.move_shape is not None:  # the move sets' members, for a head that scores sets
            parts.append(observations["move_members"].reshape(b, -1).to(h.dtype))
        return torch.cat(parts, dim=-1)

    def split(self, features: Tensor) -> GraphFeatures:
        """Recover the parts of :meth:`forward`'s ``(B, features_dim)`` output."""
        return split_features(features, self.max_nodes, self.hidden)


class GCNExtractor(GraphExtractor):
    """Graph convolutions (Kipf & Welling, 2017); edge weight ``1 + log bytes`` of the edge."""

    def init_conv(self, in_channels: int, out_channels: int) -> nn.Module:
        return GCNConv(in_channels, out_channels)

    def conv_kwargs(self, edge_attr: Tensor) -> dict[str, Tensor]:
        # 1 + feature: a tiny tensor (feature ~0) must not cut the edge out of the normalisation.
        return {"edge_weight": 1.0 + edge_attr[:, 0]}


class GATExtractor(GraphExtractor):
    """GATv2 attention (Brody et al., 2022) with the edge's log bytes as edge feature."""

    def __init__(self, observation_space: spaces.Dict, heads: int = 4, **kwargs: Any) -> None:
        self.heads = heads
        super().__init__(observation_space, **kwargs)

    def init_conv(self, in_channels: int, out_channels: int) -> nn.Module:
        if out_channels % self.heads:
            raise PlacementGymError(f"hidden={out_channels} must be divisible by heads={self.heads}")
        return GATv2Conv(in_channels, out_channels // self.heads, heads=self.heads, edge_dim=self.edge_dim)

    def conv_kwargs(self, edge_attr: Tensor) -> dict[str, Tensor]:
        return {"edge_attr": edge_attr}


class SAGEExtractor(GraphExtractor):
    """GraphSAGE mean aggregation (Hamilton et al., 2017); edge features unused."""

    def init_conv(self, in_channels: int, out_channels: int) -> nn.Module:
        return SAGEConv(in_channels, out_channels)


#: ``gnn`` name -> extractor class.
EXTRACTORS: dict[str, type[GraphExtractor]] = {
    "gcn": GCNExtractor,
    "gat": GATExtractor,
    "sage": SAGEExtractor,
}


def extractor_class(name: str) -> type[GraphExtractor]:
    """The extractor registered as ``name`` (``"gcn"``, ``"gat"``, ``"sage"``).

    Raises:
        UnknownNameError: If ``name`` is unknown.
    """
    if name not in EXTRACTORS:
        raise UnknownNameError("gnn type", name, EXTRACTORS)
    return EXTRACTORS[name]
