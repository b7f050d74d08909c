"""An observation wrapper giving the improvement env's policy the move features of every action.

:class:`~placement_gym.envs.DevicePlacementImproveEnv` describes the graph, the platform and the current
placement; the features the guided search ranks moves by (:data:`agents.learned.moves.MOVE_FEATURES`:
compute and transfer changes weighted by criticality, launch overheads, loads, size, kind, the change of
a queue-free latency estimate...) are computed from the cost model and the current placement, not
learned, so a policy that sees them need not rediscover them. :class:`MoveFeatureObservation` adds them
to the observation as one more key (the agent reads the cost model only through features, as
``guided_improvement``'s scorer does).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agents.learned.moves import KINDS, MOVE_FEATURES, MoveFeaturizer, Moves
from placement_gym.envs import DevicePlacementImproveEnv
from placement_gym.errors import PlacementGymError
from placement_gym.moves import SET_KINDS, move_sets

#: Bound of every move feature (:meth:`MoveFeaturizer.features` clips to it).
FEATURE_BOUND = 10.0


class MoveFeatureObservation(gym.Wrapper):
    """Adds ``move_features`` to a :class:`~placement_gym.envs.DevicePlacementImproveEnv` observation.

    ## Observation Space

    The wrapped env's ``Dict`` plus one key:

    | key | shape | dtype | bounds | meaning |
    |---|---|---|---|---|
    | ``move_features`` | ``(M, D, F)`` | float32 | ``[-10, 10]`` | :data:`~agents.learned.moves.MOVE_FEATURES` of sending set ``m`` to device ``d`` at the current placement; zeros where the action is masked (padding, not allowed, or a move that changes nothing) |

    ``M`` and ``D`` are those of the env's ``Discrete(M * D)`` action (action ``m * D + d``), ``F = 19``.
    The action space, rewards, ``info`` and ``action_masks()`` are the env's.

    Args:
        env: A ``DevicePlacementImproveEnv``, possibly wrapped.

    Raises:
        PlacementGymError: If ``env`` is not an improvement env.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        base = env.unwrapped
        if not isinstance(base, DevicePlacementImproveEnv):
            raise PlacementGymError(
                f"MoveFeatureObservation wraps a DevicePlacementImproveEnv, got {type(base).__name__}"
            )
        self.base = base
        cost = base.problem.cost_model()
        self.featurizer = MoveFeaturizer(cost)
        g, n, m, d = base.num_groups, base.max_nodes, base.num_moves, base.num_devices
        members, kind = move_sets(cost, base.moves)  # the env's sets: singles, then the others from N
        table = np.zeros((m, g), dtype=bool)  # (M, G) members of each action's set (padding: none)
        kinds = np.zeros(m, dtype=np.int64)  # index into KINDS (the featurizer's kinds)
        to_kinds = np.array([KINDS.index(k) for k in SET_KINDS])
        table[:g], kinds[:g] = members[:g], to_kinds[kind[:g]]
        table[n : n + len(members) - g], kinds[n : n + len(members) - g] = members[g:], to_kinds[kind[g:]]
        self.set_members, self.set_kinds = table, kinds
        self.observation_space = spaces.Dict(
            {
                **env.observation_space.spaces,
                "move_features": spaces.Box(
                    -FEATURE_BOUND, FEATURE_BOUND, (m, d, len(MOVE_FEATURES)), np.float32
                ),
            }
        )
        self._latency = math.inf

    def action_masks(self) -> np.ndarray:
        """The env's action masks (flat bool, length ``M * D``)."""
        return self.base.action_masks()

    def move_features(self) -> np.ndarray:
        """``move_features`` of the current placement, shape ``(M, D, F)`` (see the class docstring)."""
        base, d = self.base, self.base.num_devices
        out = np.zeros((base.num_moves * d, len(MOVE_FEATURES)), dtype=np.float32)
        actions = np.flatnonzero(self.action_masks())
        if len(actions) and math.isfinite(self._latency):
            sets, devices = np.divmod(actions, d)
            moves = Moves(self.set_members[sets], devices.astype(np.int64), self.set_kinds[sets])
            out[actions] = self.featurizer.features(base.placement, self._latency, moves)
        return out.reshape(base.num_moves, d, len(MOVE_FEATURES))

    def _with_features(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> dict[str, np.ndarray]:
        self._latency = float(info["current_latency"])
        return {**obs, "move_features": self.move_features()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        return self._with_features(obs, info), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._with_features(obs, info), reward, terminated, truncated, info
