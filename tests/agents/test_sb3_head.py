"""The per-(group, device) scoring head, the positional features and the improvement-move action space."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from agents.sb3.extractors import GATExtractor, SAGEExtractor, positional_table
from agents.sb3.policy import GNNActorCriticPolicy, MaskableGNNActorCriticPolicy, PairScoringHead
from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import PlacementGymError

pytestmark = pytest.mark.usefixtures("one_thread")

PAD = dict(max_nodes=16, max_edges=24)


def env_and_obs(observation: str = "device") -> tuple[DevicePlacementEnv, dict[str, torch.Tensor]]:
    env = DevicePlacementEnv("tiny_cnn", "cpu-dgpu", "simulated", observation=observation, **PAD)
    obs, _ = env.reset(seed=0)
    return env, {k: torch.as_tensor(v)[None].float() for k, v in obs.items()}


def move_space(env: DevicePlacementEnv) -> gym.spaces.Dict:
    """The improvement env's observation: no current node, a (3,) episode-progress key."""
    spaces = {k: v for k, v in env.observation_space.spaces.items() if k != "current_node"}
    spaces["episode"] = gym.spaces.Box(-10.0, 10.0, (3,), np.float32)
    return gym.spaces.Dict(spaces)


def test_positional_table_rows_are_distinct():
    table = positional_table(300, 16)
    assert table.shape == (300, 16)
    assert len(torch.unique(table.round(decimals=4), dim=0)) == 300
    with pytest.raises(PlacementGymError, match="positional"):
        SAGEExtractor(env_and_obs()[0].observation_space, positional=3)


@pytest.mark.parametrize("kind", ["placement", "current", "move"])
def test_head_shapes_padding_and_zero_bias(kind):
    env, obs = env_and_obs()
    extractor = GATExtractor(env.observation_space, hidden=8, layers=2, positional=8)
    n, d = PAD["max_nodes"], env.num_devices
    plain = PairScoringHead(extractor, d, kind, [16], [16], torch.nn.ReLU)
    biased = PairScoringHead(extractor, d, kind, [16], [16], torch.nn.ReLU, pair_bias_scale=64)
    biased.load_state_dict({**plain.state_dict(), "pair_bias": torch.zeros(n, d)})
    features = extractor(obs)
    logits = biased.forward_actor(features)
    assert logits.shape == ((1, d) if kind == "current" else (1, n * d))
    torch.testing.assert_close(logits, plain.forward_actor(features))  # the bias starts at zero
    if kind != "current":
        rows = logits.reshape(n, d)
        pad = rows[env.num_groups :]
        assert torch.all(pad[:, 1:] == -1e8)
        assert torch.all(pad[:, 0] == (0.0 if kind == "placement" else -1e8))
        with torch.no_grad():
            biased.pair_bias[0, 1] = 1.0  # moves only that pair's logit, by the scale
        moved = biased.forward_actor(features).reshape(n, d) - rows
        assert moved[0, 1].item() == pytest.approx(64.0)
        assert torch.count_nonzero(moved[: env.num_groups]) == 1
    assert biased.forward_critic(features).shape == (1, 16)


def test_head_errors():
    env, _ = env_and_obs()
    extractor = SAGEExtractor(env.observation_space, hidden=8, layers=1)
    with pytest.raises(PlacementGymError, match="action"):
        PairScoringHead(extractor, 2, "swap", [8], [8], torch.nn.ReLU)
    with pytest.raises(PlacementGymError, match="pair_bias_scale"):
        PairScoringHead(extractor, 2, "placement", [8], [8], torch.nn.ReLU, pair_bias_scale=-1)


def test_move_policy_respects_masks():
    env, obs = env_and_obs()
    space = move_space(env)
    n, d = PAD["max_nodes"], env.num_devices
    obs = {k: v for k, v in obs.items() if k != "current_node"}
    obs["episode"] = torch.zeros(1, 3)
    policy = MaskableGNNActorCriticPolicy(
        space,
        gym.spaces.Discrete(n * d),
        lambda _: 1e-3,
        net_arch={"pi": [16], "vf": [16]},
        features_extractor_class=SAGEExtractor,
        features_extractor_kwargs={"hidden": 8, "layers": 1, "positional": 4},
        pair_bias_scale=32,
    )
    mask = np.zeros((1, n * d), dtype=bool)
    mask[0, [3, 2 * d + 1]] = True
    for _ in range(20):
        actions, values, log_prob = policy(obs, action_masks=mask)
        assert int(actions[0]) in (3, 2 * d + 1)
    assert values.shape == (1, 1) and log_prob.shape == (1,)
    with pytest.raises(PlacementGymError, match="Discrete"):
        GNNActorCriticPolicy(space, gym.spaces.Discrete(n * d + 1), lambda _: 1e-3)


# ---------------------------------------------------------------------------------------- improvement moves
def test_improve_method_counts_its_budget_and_round_trips(tmp_path):
    from agents.sb3.improve import MaskablePPOImprove, RestartFromBest
    from placement_gym.problem import PlacementProblem

    problem = PlacementProblem.make("tiny_bert", "multi-accel", "simulated")
    method = MaskablePPOImprove(episode_steps=4, hidden=16, layers=1)
    result = method.place(problem, budget=40, seed=0)
    assert result.evaluations <= 40
    assert problem.evaluate(result.placement).latency == result.latency
    env = method.policy_env(DevicePlacementEnv(problem=problem))
    assert isinstance(env, RestartFromBest)
    expected = method.model.predict(env.reset(seed=0)[0], deterministic=True, action_masks=env.action_masks())[0]
    method.save(tmp_path / "improve")
    loaded = MaskablePPOImprove()
    loaded.load(tmp_path / "improve")
    assert (loaded.episode_steps, loaded.hidden) == (4, 16)
    obs, _ = env.reset(seed=0)
    again = loaded.model.predict(obs, deterministic=True, action_masks=env.action_masks())[0]
    assert int(again) == int(expected)


def test_restart_from_best_masks_tried_moves():
    from agents.sb3.improve import RestartFromBest
    from placement_gym.envs import DevicePlacementImproveEnv

    env = RestartFromBest(DevicePlacementImproveEnv("tiny_bert", "multi-accel", "simulated", max_steps=50))
    env.reset(seed=0)
    first = int(np.flatnonzero(env.action_masks())[0])
    _, reward, _, truncated, _ = env.step(first)
    assert truncated == (reward < 0)
    env.reset()  # from the best placement: the start, or the move if it was faster
    if reward < 0:
        assert not env.action_masks()[first]
    assert env.best_latency <= env.unwrapped.problem.evaluate(env.best_placement).latency


def test_set_moves_score_the_mean_of_their_members():
    from placement_gym.envs import DevicePlacementImproveEnv

    env = DevicePlacementImproveEnv("tiny_bert", "multi-accel", "simulated", moves="single,segment,branch")
    obs, _ = env.reset(seed=0)
    obs = {k: torch.as_tensor(v)[None].float() for k, v in obs.items()}
    policy = MaskableGNNActorCriticPolicy(
        env.observation_space,
        env.action_space,
        lambda _: 1e-3,
        net_arch={"pi": [16], "vf": [16]},
        gnn="sage",
        features_extractor_kwargs={"hidden": 8, "layers": 1},
        pair_bias_scale=4,
    )
    head = policy.mlp_extractor
    features = policy.extract_features(obs, policy.features_extractor)
    m, d, n = env.num_moves, env.num_devices, env.max_nodes
    logits = head.forward_actor(features).reshape(m, d)
    members = obs["move_members"][0].long()
    for s in (n, m - 1):
        real = members[s][members[s] >= 0]
        torch.testing.assert_close(logits[s], logits[real].mean(0))
    mask = env.action_masks()
    for _ in range(10):
        action = int(policy(obs, action_masks=mask[None])[0][0])
        assert mask[action]
