"""The MaskablePPO policy of ``guided_ppo``: a move scorer over move features and GNN embeddings.

The logit of action (set ``m``, device ``d``) of the improvement MDP is one MLP applied to
``[move features of (m, d), mean GNN embedding of m's groups, descriptor of d]``
(:class:`MoveScoringHead`): the move features are :data:`agents.learned.moves.MOVE_FEATURES`
(observation key ``move_features``, :class:`~agents.sb3.move_observation.MoveFeatureObservation`), the
embeddings are :class:`~agents.sb3.transfer_policy.DeviceFreeExtractor`'s (GraphSAGE over ``D``-free
group inputs at the current placement). The value is an MLP of the pooled embeddings. No weight depends
on the graph size, the number of move sets or the device count, so one ``state_dict`` fits every task
(:func:`~agents.sb3.transfer_policy.transfer_weights`).

The same networks rank the moves :func:`agents.learned.search.guided_search` proposes, window moves
included (:class:`PolicyRanker`): the GNN runs once per ranked placement, each move's set embedding is
the mean over its member groups.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor, nn

from agents.learned.moves import MOVE_FEATURES, Moves
from agents.sb3.transfer_policy import (
    _DF,
    _PAD_LOGIT,
    DeviceFreeExtractor,
    PairScoringPolicy,
    split_features,
)
from placement_gym.envs import DevicePlacementImproveEnv
from placement_gym.envs.observation import one_hot, static_arrays
from placement_gym.errors import PlacementGymError
from placement_gym.problem import PlacementProblem

F = len(MOVE_FEATURES)


class MoveFeatureExtractor(DeviceFreeExtractor):
    """:class:`DeviceFreeExtractor`'s output followed by the observation's ``move_features``
    (``(M, D, F)`` flattened).

    Raises:
        PlacementGymError: If the observation has no ``move_features`` of shape ``(M, D, F)``.
    """

    def __init__(self, observation_space: spaces.Dict, hidden: int = 32, layers: int = 3) -> None:
        inner = spaces.Dict({k: v for k, v in observation_space.spaces.items() if k != "move_features"})
        super().__init__(inner, hidden, layers)
        space = observation_space.spaces.get("move_features")
        expected = (self.num_moves, self.num_devices, F)
        if space is None or tuple(space.shape) != expected:
            raise PlacementGymError(
                f"the observation needs 'move_features' of shape {expected} "
                "(wrap the env in agents.sb3.move_observation.MoveFeatureObservation)"
            )
        self.base_dim = self.features_dim
        self._features_dim = self.base_dim + math.prod(expected)
        self._observation_space = observation_space

    def forward(self, obs: dict[str, Tensor]) -> Tensor:
        base = super().forward(obs)
        return torch.cat([base, obs["move_features"].reshape(base.shape[0], -1)], dim=1)

    def embed(self, obs: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """Per-set (or, without ``move_members``, per-group) embeddings ``(B, M, H)``, the context
        ``(B, C)`` and the device descriptors ``(B, D, 5)``."""
        nodes, _, ctx, _, _, df, _ = _split(super().forward(obs), self)
        return nodes, ctx, df


def _split(base: Tensor, ex: DeviceFreeExtractor) -> tuple[Tensor, ...]:
    """:class:`DeviceFreeExtractor`'s flat output of ``ex``, split by
    :func:`~agents.sb3.transfer_policy.split_features`."""
    return split_features(base, ex.num_moves, ex.num_devices, ex.hidden, ex.context_dim)


class MoveScoringHead(nn.Module):
    """Takes the place of SB3's ``mlp_extractor``: one logit per (set, device) action, a value latent.

    The logit MLP's first layer is split into a move-feature, a set and a device part (one linear map
    on the concatenation), so the set embeddings are not repeated ``D`` times. The move features are
    standardised with the buffers ``feature_mean`` / ``feature_std`` (set from training data by
    :meth:`set_normalisation`; part of the ``state_dict``).

    Args:
        extractor: The :class:`MoveFeatureExtractor` whose output it reads.
        pi_arch: Hidden widths of the logit MLP (at least one).
        vf_arch: Hidden widths of the value MLP.
    """

    def __init__(self, extractor: MoveFeatureExtractor, pi_arch: list[int], vf_arch: list[int]) -> None:
        super().__init__()
        if not pi_arch:
            raise PlacementGymError("the move MLP needs at least one hidden layer (net_arch pi=[...])")
        self.extractor_dims = (extractor.num_moves, extractor.num_devices, extractor.base_dim)
        self.move_in = nn.Linear(F, pi_arch[0])
        self.set_in = nn.Linear(extractor.hidden, pi_arch[0], bias=False)
        self.device_in = nn.Linear(_DF, pi_arch[0], bias=False)
        layers: list[nn.Module] = []
        for a, b in zip(pi_arch, pi_arch[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.pi_body = nn.Sequential(*layers)
        self.logit = nn.Linear(pi_arch[-1], 1)
        vf: list[nn.Module] = []
        width = extractor.context_dim
        for w in vf_arch:
            vf += [nn.Linear(width, w), nn.ReLU()]
            width = w
        self.vf_body, self.latent_dim_vf = nn.Sequential(*vf), width
        self.latent_dim_pi = extractor.num_moves * extractor.num_devices
        self.register_buffer("feature_mean", torch.zeros(F))
        self.register_buffer("feature_std", torch.ones(F))
        self._extractor = [extractor]  # not a submodule: SB3 owns it
        for layer in (self.move_in, self.set_in, self.device_in, *self.pi_body, *self.vf_body):
            if isinstance(layer, nn.Linear):
                nn.init.orthogonal_(layer.weight, gain=math.sqrt(2))
                if layer.bias is not None:
                    nn.init.zeros_(layer.bias)
        nn.init.orthogonal_(self.logit.weight, gain=0.01)
        nn.init.zeros_(self.logit.bias)

    def set_normalisation(self, features: np.ndarray) -> None:
        """Standardise move features with the mean and std of ``features`` (``(K, F)``)."""
        x = torch.as_tensor(np.asarray(features, dtype=np.float32))
        self.feature_mean.copy_(x.mean(0))
        self.feature_std.copy_(x.std(0) + 1e-3)

    def score(self, move: Tensor, sets: Tensor, devices: Tensor) -> Tensor:
        """Logits of moves from their features ``(..., F)``, set embeddings ``(..., H)`` and target
        device descriptors ``(..., 5)`` (broadcast against each other), shape ``(...)``."""
        x = self.move_in((move - self.feature_mean) / self.feature_std) + self.set_in(sets)
        hidden = torch.relu(x + self.device_in(devices))
        return self.logit(self.pi_body(hidden)).squeeze(-1)

    def forward_actor(self, features: Tensor) -> Tensor:
        """Logits ``(B, M * D)``, set-major (action ``m * D + d``); empty (padding) sets at -1e8."""
        m, d, base_dim = self.extractor_dims
        base, moves = features[:, :base_dim], features[:, base_dim:]
        nodes, mask, _, _, _, df, _ = _split(base, self._extractor[0])
        b = features.shape[0]
        logits = self.score(moves.reshape(b, m, d, F), nodes.unsqueeze(2), df.unsqueeze(1))  # (B, M, D)
        logits = torch.where(mask.unsqueeze(-1), logits, torch.full_like(logits, _PAD_LOGIT))
        return logits.reshape(b, m * d)

    def forward_critic(self, features: Tensor) -> Tensor:
        _, _, base_dim = self.extractor_dims
        return self.vf_body(_split(features[:, :base_dim], self._extractor[0])[2])

    def forward(self, features: Tensor) -> tuple[Tensor, Tensor]:
        return self.forward_actor(features), self.forward_critic(features)


class GuidedPPOPolicy(PairScoringPolicy):
    """sb3-contrib ``MaskableActorCriticPolicy`` with :class:`MoveFeatureExtractor` and
    :class:`MoveScoringHead`; action ``Discrete(M * D)`` (send set ``a // D`` to device ``a % D``).
    Everything but the two classes is :class:`~agents.sb3.transfer_policy.PairScoringPolicy`'s.

    Args:
        observation_space: :class:`~agents.sb3.move_observation.MoveFeatureObservation`'s ``Dict``.
        action_space: ``Discrete(M * D)``.
        lr_schedule: Learning-rate schedule.
        net_arch: Hidden widths of the heads: a list (both) or ``{"pi": [...], "vf": [...]}``.
        **kwargs: Other policy arguments (``features_extractor_kwargs``: ``hidden``, ``layers``).

    Raises:
        PlacementGymError: If the action space is not ``Discrete(M * D)`` for the observation.
    """

    extractor_class = MoveFeatureExtractor
    head_class = MoveScoringHead


def ranker_space(env: DevicePlacementImproveEnv) -> spaces.Dict:
    """``env``'s observation space plus the ``move_features`` key of
    :class:`~agents.sb3.move_observation.MoveFeatureObservation` (for one set per group, ``(G, D, F)``)."""
    move_features = spaces.Box(-10, 10, (env.max_nodes, env.num_devices, F), np.float32)
    return spaces.Dict({**env.observation_space.spaces, "move_features": move_features})


#: The parts of a :class:`GuidedPPOPolicy` ``state_dict`` (SB3 stores the shared extractor three times).
POLICY_PARTS = ("features_extractor.", "pi_features_extractor.", "vf_features_extractor.", "mlp_extractor.", "value_net.")


def refuse_unknown_tensors(state: dict[str, Tensor]) -> None:
    """Refuse a ``state_dict`` with a tensor that no part of the policy has (an edited or another
    model's weights file), which loading only the ranker's parts would silently skip.

    Raises:
        PlacementGymError: Naming the first unknown tensors.
    """
    unknown = [k for k in state if not k.startswith(POLICY_PARTS)]
    if unknown:
        names = ", ".join(repr(k[:64]) for k in unknown[:3]) + (" ..." if len(unknown) > 3 else "")
        raise PlacementGymError(
            f"the weights do not fit this architecture: {len(unknown)} tensor(s) it does not have ({names})"
        )


class PolicyRanker:
    """:class:`~agents.learned.search.MoveRanker` from a :class:`GuidedPPOPolicy`'s networks: a move's
    score is minus its logit (higher logit, tried first).

    The GNN runs on the placement :meth:`visit` was last given (``guided_search``'s ``visitor``, called
    at every placement before its moves are ranked); a move's set embedding is the mean of its member
    groups' embeddings, its device descriptor the target's. Nothing is learned while ranking.

    Args:
        problem: The task whose moves are ranked.
        extractor: A :class:`MoveFeatureExtractor` built for any spaces; the ranker's own extractor (for
            ``problem``'s spaces) shares its layers, so gradients of :meth:`embeddings` reach them.
        head: The :class:`MoveScoringHead` whose :meth:`~MoveScoringHead.score` gives the logits.
    """

    def __init__(
        self, problem: PlacementProblem, extractor: MoveFeatureExtractor, head: MoveScoringHead
    ) -> None:
        env = DevicePlacementImproveEnv(problem=problem, moves="single")
        self.num_groups, self.num_devices, self.max_nodes = env.num_groups, env.num_devices, env.max_nodes
        self.extractor = MoveFeatureExtractor(ranker_space(env), extractor.hidden, len(extractor.convs))
        self.extractor.input, self.extractor.convs = extractor.input, extractor.convs  # shared layers
        self.head = head
        static = static_arrays(problem, env.max_nodes, env.max_edges, device=True)
        static["episode"] = np.zeros(3, dtype=np.float32)  # read by the value head only
        self._static = {k: torch.as_tensor(np.array(v))[None] for k, v in static.items()}
        self._nodes: Tensor | None = None
        self._devices: Tensor | None = None

    @classmethod
    def from_state(
        cls, problem: PlacementProblem, state: dict[str, Tensor], hidden: int, layers: int, head: list[int]
    ) -> PolicyRanker:
        """The ranker of a :class:`GuidedPPOPolicy` ``state_dict`` (its ``features_extractor.*`` and
        ``mlp_extractor.*``) with that architecture, in eval mode.

        Raises:
            PlacementGymError: If ``state`` does not fit the architecture.
        """
        refuse_unknown_tensors(state)
        extractor = MoveFeatureExtractor(
            ranker_space(DevicePlacementImproveEnv(problem=problem, moves="single")), hidden, layers
        )
        module = MoveScoringHead(extractor, list(head), list(head))
        for part, prefix in ((extractor, "features_extractor."), (module, "mlp_extractor.")):
            weights = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            try:
                part.load_state_dict(weights)
            except RuntimeError as exc:
                text = " ".join(str(exc).split())[:300]
                raise PlacementGymError(f"the weights do not fit this architecture ({text})") from exc
        extractor.eval()
        module.eval()
        return cls(problem, extractor, module)

    def embeddings(self, placement: np.ndarray) -> tuple[Tensor, Tensor]:
        """Group embeddings ``(G, H)`` and device descriptors ``(D, 5)`` at ``placement``."""
        place = one_hot(placement, self.max_nodes, self.num_devices)
        nodes, _, df = self.extractor.embed({**self._static, "placement": torch.as_tensor(place)[None]})
        return nodes[0, : self.num_groups], df[0]

    def logits(self, features: np.ndarray, moves: Moves, nodes: Tensor, devices: Tensor) -> Tensor:
        """Logits ``(K,)`` of ``moves`` with ``features`` ``(K, F)`` from group embeddings and devices."""
        members = torch.as_tensor(moves.members, dtype=nodes.dtype)  # (K, G)
        sets = members @ nodes / members.sum(1, keepdim=True).clamp(min=1.0)
        target = devices[torch.as_tensor(moves.target, dtype=torch.long)]
        return self.head.score(torch.as_tensor(features, dtype=torch.float32), sets, target)

    # guided_search's visitor
    def visit(self, placement: np.ndarray, latency: float, moves: Moves, features: np.ndarray) -> None:
        """Embed ``placement`` (the one whose moves are ranked next)."""
        with torch.no_grad():
            self._nodes, self._devices = self.embeddings(placement)

    # MoveRanker protocol
    def scores(self, features: np.ndarray, moves: Moves) -> np.ndarray:
        if self._nodes is None or self._devices is None:
            raise PlacementGymError("PolicyRanker.scores before visit(): pass ranker.visit as the visitor")
        with torch.no_grad():
            return -self.logits(features, moves, self._nodes, self._devices).double().numpy()

    def observe(self, features: np.ndarray, change: np.ndarray) -> None:
        return None
