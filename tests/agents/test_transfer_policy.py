"""The device-free pair-scoring policy: shapes, padding, and one set of weights for any N and D."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agents.sb3.transfer_policy import PairScoringPolicy, transfer_weights
from placement_gym.errors import PlacementGymError


def _spaces(n: int, e: int, d: int) -> tuple[spaces.Dict, spaces.Discrete]:
    box = lambda shape, high=1.0: spaces.Box(0.0, high, shape, np.float32)  # noqa: E731
    obs = spaces.Dict(
        {
            "node_features": box((n, 28)),
            "node_mask": box((n,)),
            "edge_index": spaces.Box(0, n - 1, (2, e), np.int64),
            "edge_features": box((e, 1)),
            "edge_mask": box((e,)),
            "node_device_features": box((n, d, 3)),
            "edge_link_features": box((e, d * d)),
            "device_features": box((d, 5)),
            "placement": box((n, d)),
            "episode": spaces.Box(-10.0, 10.0, (3,), np.float32),
        }
    )
    return obs, spaces.Discrete(n * d)


def _obs(n: int, e: int, d: int, groups: int, seed: int) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, groups - 1, size=e)
    dst = np.minimum(src + 1 + rng.integers(0, 2, size=e), groups - 1)
    place = np.zeros((n, d), np.float32)
    place[np.arange(groups), rng.integers(d, size=groups)] = 1
    obs = {
        "node_features": rng.random((n, 28)),
        "node_mask": (np.arange(n) < groups),
        "edge_index": np.stack([src, dst]),
        "edge_features": rng.random((e, 1)),
        "edge_mask": np.ones(e),
        "node_device_features": rng.random((n, d, 3)),
        "edge_link_features": rng.random((e, d * d)),
        "device_features": rng.random((d, 5)),
        "placement": place,
        "episode": rng.random(3),
    }
    return {k: torch.as_tensor(np.asarray(v), dtype=torch.float32).unsqueeze(0) for k, v in obs.items()}


def _policy(n: int, e: int, d: int) -> PairScoringPolicy:
    obs, act = _spaces(n, e, d)
    return PairScoringPolicy(obs, act, lambda _: 1e-3, features_extractor_kwargs={"hidden": 16, "layers": 2})


def test_logits_per_group_and_device_with_padding_never_chosen():
    policy = _policy(6, 8, 3)
    obs = _obs(6, 8, 3, groups=4, seed=0)
    logits = policy.mlp_extractor.forward_actor(policy.extract_features(obs, policy.features_extractor))
    assert logits.shape == (1, 18)
    assert (logits.reshape(6, 3)[4:] <= -1e7).all() and (logits.reshape(6, 3)[:4] > -1e7).all()
    actions, values, log_prob = policy(obs)
    assert 0 <= int(actions) < 12 and values.shape == (1, 1) and torch.isfinite(log_prob).all()


def test_weights_transfer_across_graph_sizes_and_device_counts():
    small, big = _policy(6, 8, 2), _policy(9, 12, 4)
    transfer_weights(small.state_dict(), big)
    for (k, a), b in zip(small.state_dict().items(), big.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    features = big.extract_features(_obs(9, 12, 4, 7, 1), big.features_extractor)
    logits = big.mlp_extractor.forward_actor(features)
    assert logits.shape == (1, 36) and torch.isfinite(logits).all()
    other = PairScoringPolicy(*_spaces(6, 8, 2), lambda _: 1e-3, features_extractor_kwargs={"hidden": 8})
    with pytest.raises(PlacementGymError, match="do not fit"):
        transfer_weights(small.state_dict(), other)


def test_refuses_a_placement_action_space():
    obs, _ = _spaces(4, 4, 2)
    with pytest.raises(PlacementGymError, match="Discrete"):
        PairScoringPolicy(obs, spaces.MultiDiscrete([2] * 4), lambda _: 1e-3)


def test_move_sets_score_each_set_and_share_the_weights_of_single_moves():
    n, e, d, m, s = 6, 8, 3, 9, 3
    obs_space, _ = _spaces(n, e, d)
    obs_space = spaces.Dict(
        {
            **obs_space.spaces,
            "move_members": spaces.Box(-1, n - 1, (m, s), np.int64),
            "move_kind": spaces.Box(0.0, 1.0, (m, 4), np.float32),
        }
    )
    extractor = {"hidden": 16, "layers": 2}
    action = spaces.Discrete(m * d)
    policy = PairScoringPolicy(obs_space, action, lambda _: 1e-3, features_extractor_kwargs=extractor)
    transfer_weights(_policy(6, 8, 3).state_dict(), policy)  # the same weights as single moves
    obs = _obs(n, e, d, groups=4, seed=2)
    members = -np.ones((m, s))
    members[:4, 0] = np.arange(4)  # the 4 groups alone, sets 4, 5 padding singles, then two real sets
    members[6, :2], members[7, :3] = [0, 1], [1, 2, 3]
    kinds = np.zeros((m, 4))
    kinds[:4, 0], kinds[6:8, 1] = 1, 1
    obs["move_members"] = torch.as_tensor(members, dtype=torch.float32).unsqueeze(0)
    obs["move_kind"] = torch.as_tensor(kinds, dtype=torch.float32).unsqueeze(0)
    logits = policy.mlp_extractor.forward_actor(policy.extract_features(obs, policy.features_extractor))
    rows = logits.reshape(m, d)
    assert (rows[[4, 5, 8]] <= -1e7).all() and (rows[[0, 1, 2, 3, 6, 7]] > -1e7).all()
