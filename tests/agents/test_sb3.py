"""SB3 integration: GNN extractors, per-node policies, distributions and the SB3 placement methods."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest
import torch
from sb3_contrib import MaskablePPO
from stable_baselines3 import A2C, PPO
from stable_baselines3.common.distributions import MultiCategoricalDistribution
from torch_geometric.data import Batch, Data

from agents.baselines.random_search import RandomSearch
from agents.sb3.distributions import (
    BatchedMultiCategoricalDistribution,
    MaskableBatchedMultiCategoricalDistribution,
)
from agents.sb3.extractors import EXTRACTORS, GraphExtractor, extractor_class, unpad
from agents.sb3.methods import A2CGNN, PPOGNN, PPOMLP, MaskablePPOGNN
from agents.sb3.policy import GNNActorCriticPolicy, MaskableGNNActorCriticPolicy
from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import PlacementGymError, UnknownNameError

PAD = dict(max_nodes=16, max_edges=24)


pytestmark = pytest.mark.usefixtures("one_thread")


def make_env(model: str = "tiny_cnn", platform: str = "cpu-dgpu", **kwargs) -> DevicePlacementEnv:
    return DevicePlacementEnv(model, platform, "simulated", **kwargs)


def batch_of_observations(seed: int = 0) -> tuple[dict[str, torch.Tensor], list[DevicePlacementEnv]]:
    """Observations of two different graphs padded alike, with random placements, as SB3 batches them."""
    envs = [make_env(**PAD), make_env("tiny_bert", coarsening="k", k=6, **PAD)]
    rng = np.random.default_rng(seed)
    observations = []
    for env in envs:
        env.reset(seed=seed)
        env.placement = rng.integers(0, env.num_devices, env.num_groups)
        observations.append(env._observation())
    obs = {k: torch.as_tensor(np.stack([o[k] for o in observations])).float() for k in observations[0]}
    return obs, envs  # edge_index is float, as after SB3's preprocessing


# ---------------------------------------------------------------------------------------- extractors
def test_unpad_matches_batch_from_data_list():
    obs, envs = batch_of_observations()
    data = []
    for i, env in enumerate(envs):
        g, m = env.num_groups, env.problem.coarse.graph.num_edges
        x = torch.cat([obs["node_features"][i], obs["placement"][i], obs["current_node"][i, :, None]], -1)
        data.append(
            Data(
                x=x[:g], edge_index=obs["edge_index"][i, :, :m].long(), edge_attr=obs["edge_features"][i, :m]
            )
        )
    expected = Batch.from_data_list(data)
    graph = unpad(obs)
    assert torch.equal(graph.x, expected.x)
    assert torch.equal(graph.edge_index, expected.edge_index)
    assert torch.equal(graph.edge_attr, expected.edge_attr)
    assert torch.equal(graph.batch, expected.batch)


@pytest.mark.parametrize("gnn", sorted(EXTRACTORS))
def test_extractor_shapes_and_split(gnn):
    obs, envs = batch_of_observations()
    space = envs[0].observation_space
    extractor = extractor_class(gnn)(space, hidden=8, layers=2)
    n, h = PAD["max_nodes"], 8
    features = extractor(obs)
    assert features.shape == (2, extractor.features_dim) == (2, n * h + n + 3 * h)
    parts = extractor.split(features)
    assert parts.nodes.shape == (2, n, h) and parts.context.shape == (2, 3 * h)
    assert torch.equal(parts.mask, obs["node_mask"] > 0.5)
    assert torch.all(parts.nodes[~parts.mask] == 0)
    # One-shot: no current node, so the last third of the context is zero.
    assert torch.all(parts.context[:, 2 * h :] == 0)


@pytest.mark.parametrize("gnn", sorted(EXTRACTORS))
def test_batching_does_not_mix_graphs(gnn):
    obs, envs = batch_of_observations()
    extractor = extractor_class(gnn)(envs[0].observation_space, hidden=8, layers=2)
    together = extractor(obs)
    for i in range(2):
        alone = extractor({k: v[i : i + 1] for k, v in obs.items()})
        torch.testing.assert_close(alone[0], together[i])


def test_extractor_errors():
    with pytest.raises(UnknownNameError, match="gcn"):
        extractor_class("gnc")
    with pytest.raises(PlacementGymError, match="lacks"):
        GraphExtractor(gym.spaces.Dict({"node_features": gym.spaces.Box(0, 1, (3, 2))}))


# ---------------------------------------------------------------------------------------- policies
def test_batched_distributions_match_sb3():
    torch.manual_seed(0)
    b, n, d = 5, 7, 3
    logits, actions = torch.randn(b, n * d), torch.randint(0, d, (b, n))
    ref = MultiCategoricalDistribution([d] * n).proba_distribution(logits)
    new = BatchedMultiCategoricalDistribution(n, d).proba_distribution(logits)
    torch.testing.assert_close(new.log_prob(actions), ref.log_prob(actions))
    torch.testing.assert_close(new.entropy(), ref.entropy())
    assert torch.equal(new.mode(), ref.mode())


def test_masked_distribution_never_samples_masked_devices():
    torch.manual_seed(0)
    n, d = 6, 4
    mask = torch.rand(1, n, d) > 0.5
    mask[..., 2] = True
    dist = MaskableBatchedMultiCategoricalDistribution(n, d).proba_distribution(torch.zeros(1, n * d))
    dist.apply_masking(mask.reshape(1, -1).numpy())
    samples = torch.stack([dist.sample()[0] for _ in range(200)])  # (200, N)
    assert mask[0].gather(1, samples.T).all()


def test_initial_policy_is_near_uniform_and_padding_is_deterministic():
    obs, envs = batch_of_observations()
    policy = GNNActorCriticPolicy(envs[0].observation_space, envs[0].action_space, lambda _: 1e-3)
    dist = policy.get_distribution(obs)
    probs = dist.dist.probs  # (B, N, D)
    real = obs["node_mask"] > 0.5
    assert torch.allclose(probs[real], torch.full_like(probs[real], 0.5), atol=0.05)
    assert torch.all(probs[~real][:, 0] == 1.0)
    entropy = dist.entropy()
    torch.testing.assert_close(entropy, real.sum(1).float() * np.log(2), atol=0.02, rtol=0)


def test_policy_rejects_mismatched_spaces():
    env = make_env(**PAD)
    with pytest.raises(PlacementGymError, match="MultiDiscrete"):
        GNNActorCriticPolicy(env.observation_space, gym.spaces.MultiDiscrete([3] * 16), lambda _: 1e-3)


ALGOS = [
    (PPO, GNNActorCriticPolicy),
    (A2C, GNNActorCriticPolicy),
    (MaskablePPO, MaskableGNNActorCriticPolicy),
]


@pytest.mark.parametrize("mode", ["oneshot", "sequential"])
@pytest.mark.parametrize("algo,policy", ALGOS, ids=lambda a: getattr(a, "__name__", ""))
def test_policy_learns_with_sb3(algo, policy, mode):
    env = make_env(mode=mode, **PAD)
    kwargs = {"n_steps": 32} if algo is A2C else {"n_steps": 32, "batch_size": 32}
    model = algo(policy, env, seed=0, device="cpu", **kwargs)
    before = [p.detach().clone() for p in model.policy.features_extractor.parameters()]
    model.learn(128)
    after = list(model.policy.features_extractor.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))  # the GNN is trained
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(np.asarray(action, dtype=np.int64).reshape(env.action_space.shape))


class ForbidDevices(gym.Wrapper):
    """Masks device 1 everywhere (and device 0 of some groups) and fails on any masked action."""

    def __init__(self, env: DevicePlacementEnv) -> None:
        super().__init__(env)
        u = env.unwrapped
        self.mask = np.ones((u.max_nodes, u.num_devices), dtype=bool)
        self.mask[:, 1] = False
        self.mask[: u.num_groups : 2, 0] = False  # even groups: only devices 2, 3
        self.actions: list[np.ndarray] = []

    def action_masks(self) -> np.ndarray:
        if self.env.unwrapped.mode == "sequential":
            return self.mask[min(self.env.unwrapped._cursor, self.env.unwrapped.num_groups - 1)].copy()
        return self.mask.reshape(-1).copy()

    def step(self, action):
        allowed = self.action_masks().reshape(-1, self.mask.shape[1])
        act = np.asarray(action).reshape(-1)
        if not allowed[np.arange(len(act)), act].all():
            raise AssertionError(f"masked action {act} was taken")
        self.actions.append(act)
        return self.env.step(action)


@pytest.mark.parametrize("mode", ["oneshot", "sequential"])
def test_maskable_ppo_never_takes_masked_actions(mode):
    env = ForbidDevices(make_env(platform="multi-accel", mode=mode))
    model = MaskablePPO(MaskableGNNActorCriticPolicy, env, n_steps=32, batch_size=32, seed=0, device="cpu")
    model.learn(256)
    assert len(env.actions) >= 256  # the wrapper checked every step


# ---------------------------------------------------------------------------------------- methods
def test_toy_optimum_found_and_random_search_beaten():
    """tiny_cnn on the 4-device platform: 4**8 = 65,536 placements, brute-forced with the simulator."""
    env = make_env(platform="multi-accel")
    grid = np.array(list(itertools.product(range(env.num_devices), repeat=env.num_groups)), dtype=np.int64)
    latencies = np.array([r.latency for r in env.problem.backend.evaluate_batch(grid)])
    optimum = latencies.min()
    assert np.sort(latencies)[1] > 1.5 * optimum  # a unique, clearly best placement
    budget = 384
    ppo = PPOGNN().place(env, budget=budget, seed=0)
    assert ppo.evaluations <= budget
    assert ppo.latency == pytest.approx(optimum, rel=1e-9)
    random = RandomSearch().place(make_env(platform="multi-accel"), budget=budget, seed=0)
    assert ppo.latency < random.latency


@pytest.mark.parametrize("cls", [PPOGNN, A2CGNN, MaskablePPOGNN, PPOMLP])
def test_methods_spend_budget_and_return_model(cls):
    env = make_env()
    result = cls().place(env, budget=40, seed=0)
    # 40 steps; a placement sampled again is free, so the distinct placements may stay below the budget
    assert 1 <= result.evaluations <= 40 and len(result.history) == result.evaluations == env.problem.evaluations
    assert np.isfinite(result.latency) and result.placement.shape == (env.num_groups,)
    assert result.extra["model"] is not None and result.extra["train_steps"] >= 32
    assert np.isfinite(result.extra["final_mean_reward"])


def test_sequential_method_counts_final_placements():
    env = make_env(mode="sequential")
    result = PPOGNN().place(env, budget=10, seed=0)
    assert 1 <= result.evaluations <= 10 and result.evaluations == env.problem.evaluations
    assert result.extra["train_steps"] == 9 * env.num_groups


def test_saved_policy_applies_to_another_graph(tmp_path):
    method = PPOGNN(gnn="gat", hidden=16, layers=2)
    method.place(make_env(max_nodes=64, max_edges=128), budget=48, seed=0)
    method.save(tmp_path / "ppo_gnn")
    other = make_env("tiny_bert", coarsening="k", k=16, max_nodes=64, max_edges=128)
    expected = method.predict_placement(other)
    loaded = PPOGNN()
    loaded.load(tmp_path / "ppo_gnn")
    placement = loaded.predict_placement(other)
    assert placement.shape == (other.num_groups,) and np.array_equal(placement, expected)
    assert np.all((placement >= 0) & (placement < other.num_devices))


def test_method_errors():
    with pytest.raises(UnknownNameError):
        PPOGNN(gnn="transformer")
    with pytest.raises(PlacementGymError, match="no trained model"):
        PPOGNN().predict_placement(make_env())
    with pytest.raises(PlacementGymError, match="budget"):
        PPOGNN(n_envs=2).place(make_env(), budget=2)
    method = PPOGNN()
    method.place(make_env(), budget=20, seed=0)
    with pytest.raises(PlacementGymError, match="max_nodes"):
        method.predict_placement(make_env("tiny_bert"))


def test_n_envs_runs_worker_processes_and_keeps_the_budget_exact(monkeypatch):
    """n_envs > 1: env copies in a real SubprocVecEnv; every evaluation in a worker counts, none over budget."""
    from stable_baselines3.common.vec_env import SubprocVecEnv

    env = make_env()
    method = PPOGNN(n_envs=2, n_steps=8, batch_size=16)
    made, make_vec_env = [], method.make_vec_env  # the run's own vector env (its workers start once)
    monkeypatch.setattr(method, "make_vec_env", lambda e: made.append(make_vec_env(e)) or made[-1])
    sources = []  # (worker, vector step, seconds) of each evaluation, as the listeners see them

    def listen(tracker, *_):
        sources.append((tracker.worker, tracker.vector_step, tracker.evaluation_s))

    result = method.place(env, budget=21, seed=0, listeners=[listen])
    assert len(made) == 1 and isinstance(made[0], SubprocVecEnv)
    *workers, final = sources
    assert {w for w, _, _ in workers} <= {0, 1} and all(s is None for _, _, s in workers)  # simulated: no seconds
    steps = [v for _, v, _ in workers]
    assert steps == sorted(steps) and steps[0] == 1 and all(steps.count(v) <= 2 for v in steps)
    assert all(a[0] < b[0] for a, b in zip(workers, workers[1:]) if a[1] == b[1])  # a step's workers in order
    assert final[:2] == (None, None) and final[2] >= 0  # the final placement: evaluated in this process
    assert 1 <= result.evaluations <= 21 and len(result.history) == result.evaluations
    assert env.problem.evaluations == 1  # only the final deterministic placement ran in this process
    assert np.isfinite(result.latency)
    with pytest.raises(PlacementGymError, match="cannot be pickled"):
        PPOGNN(n_envs=2).make_vec_env(DevicePlacementEnv(backend=env.problem.backend))


@pytest.mark.parametrize("gnn", sorted(EXTRACTORS))
def test_device_aware_observation_reaches_the_extractor(gnn):
    """observation="device": per-device node columns and per-link edge columns change the embeddings."""
    env = make_env("tiny_bert", "multi-accel", observation="device", max_nodes=64, max_edges=80)
    extractor = extractor_class(gnn)(env.observation_space, hidden=16, layers=2)
    assert extractor.device_aware and extractor.input.in_features == 28 + 4 + 1 + 4 * 3 + 4 * 5
    obs, _ = env.reset(seed=0)
    batch = {k: torch.as_tensor(v[None]).float() for k, v in obs.items()}
    out = extractor(batch)
    batch["node_device_features"] = torch.zeros_like(batch["node_device_features"])
    assert not torch.allclose(out, extractor(batch))
    plain = make_env("tiny_bert", "multi-accel", max_nodes=64, max_edges=80)
    assert not extractor_class(gnn)(plain.observation_space, hidden=16, layers=2).device_aware


def test_method_trains_on_a_device_aware_view_of_the_env():
    env = make_env("tiny_bert", "multi-accel")
    result = PPOGNN(observation="device", hidden=16).place(env, budget=24, seed=0)
    assert 1 <= result.evaluations <= 24 and env.problem.evaluations == result.evaluations
    assert "node_device_features" in result.extra["model"].observation_space.spaces
    with pytest.raises(UnknownNameError):
        PPOGNN(observation="devices")
