from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import placement_gym
from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import PlacementError, PlacementGymError, UnknownNameError
from placement_gym.zoo import BENCHMARK_MODELS

TINY_SIM = dict(model="tiny_cnn", platform="cpu-dgpu", backend="simulated")


@pytest.fixture
def sim_env():
    env = gym.make("DevicePlacement-v0", **TINY_SIM)
    yield env
    env.close()


def test_registry_lists_every_model():
    assert placement_gym.BENCHMARK_MODELS == BENCHMARK_MODELS
    for model in BENCHMARK_MODELS:
        assert gym.spec(f"DevicePlacement-{model}-v0").nondeterministic
        assert gym.spec(f"DevicePlacement-{model}-v1").nondeterministic
        assert not gym.spec(f"DevicePlacementSim-{model}-v0").nondeterministic
    assert gym.spec("DevicePlacement-v0").nondeterministic


def test_measured_versions_pin_their_protocol():
    """v0 keeps the fixed 5 runs it was recorded with; v1 takes the adaptive repeats."""
    v0 = gym.spec("DevicePlacement-resnet50-v0").kwargs
    v1 = gym.spec("DevicePlacement-resnet50-v1").kwargs
    assert v0["backend_kwargs"] == {"rel_ci": None, "repeats": 5}
    assert "backend_kwargs" not in v1
    assert {k: v for k, v in v0.items() if k != "backend_kwargs"} == v1


@pytest.mark.slow
def test_make_with_module_prefix_needs_no_import():
    """``gym.make("placement_gym:DevicePlacement-bert-v1")`` works in a fresh interpreter."""
    import subprocess
    import sys

    code = (
        "import gymnasium as gym, sys; assert 'placement_gym' not in sys.modules; "
        "env = gym.make('placement_gym:DevicePlacement-bert-v1'); "
        "print(env.unwrapped.num_groups, env.unwrapped.problem.platform.name)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    groups, platform = out.stdout.split()[-2:]
    assert int(groups) > 100 and platform == "local"


@pytest.mark.parametrize(
    "env_id", [i for i in placement_gym.ENV_IDS if gym.spec(i).nondeterministic and i not in placement_gym.ALIASES]
)
def test_check_env_measured_ids_on_tiny_model(env_id):
    """Measured IDs (local platform) pass both checkers, with the tiny model swapped in for speed."""
    env = gym.make(env_id, model="tiny_cnn", backend_kwargs={"warmup": 1, "repeats": 2})
    gym_check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(env.unwrapped, warn=False)
    env.close()


@pytest.mark.parametrize("model", ["tiny_cnn", "tiny_bert"])
@pytest.mark.parametrize("mode", ["oneshot", "sequential"])
def test_check_env_simulated_tiny(model, mode):
    env = gym.make("DevicePlacement-v0", model=model, platform="cpu-dgpu", backend="simulated", mode=mode)
    gym_check_env(env.unwrapped)
    sb3_check_env(env.unwrapped, warn=False)


@pytest.mark.slow
@pytest.mark.parametrize("model", BENCHMARK_MODELS)
def test_check_env_simulated_benchmark_ids(model):
    env = gym.make(f"DevicePlacementSim-{model}-v0")
    gym_check_env(env.unwrapped)
    sb3_check_env(env.unwrapped, warn=False)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(env.action_space.sample())
    assert info["baseline_latency"] > 0 and np.isfinite(reward)


def test_simulated_rewards_are_reproducible():
    rewards = []
    for _ in range(2):
        env = gym.make("DevicePlacement-v0", **TINY_SIM, initial_placement="random")
        obs, _ = env.reset(seed=123)
        env.action_space.seed(7)
        steps = []
        for _ in range(3):
            steps.append(env.step(env.action_space.sample())[1])
            env.reset()
        rewards.append(steps + [obs["placement"].tolist()])
        env.close()
    assert rewards[0] == rewards[1]


def test_step_info_and_reward(sim_env):
    env = sim_env.unwrapped
    sim_env.reset(seed=0)
    g, d = env.num_groups, env.num_devices
    assert env.action_space.nvec.tolist() == [d] * g
    for dev in range(d):
        sim_env.reset()
        _, reward, terminated, truncated, info = sim_env.step(np.full(g, dev))
        assert terminated and not truncated
        assert info["feasible"] and info["latency"] >= info["baseline_latency"] * (1 - 1e-9)
        assert np.isclose(reward, info["baseline_latency"] / info["latency"] - 1.0)
    assert max(env.problem.evaluate(np.full(g, dev)).latency for dev in range(d)) >= info["baseline_latency"]
    assert info["latency_ci_ms"] == 0.0 and info["latency_rel_ci"] == 0.0 and "host_load" not in info
    assert "evaluation_s" not in info  # a wall time: a simulated env's info depends on seed and actions only
    assert env.problem.last_evaluation_s == 0.0  # the last step repeated a placement: answered from the memo


def test_evaluation_seconds_in_info_of_a_nondeterministic_backend():
    """``info["evaluation_s"]``: the backend's wall seconds for the step's placement, 0.0 when the run's memo
    answers; shown on the simulator made nondeterministic (a measured env's info has the same key)."""
    from placement_gym.problem import PlacementProblem

    problem = PlacementProblem.make("tiny_cnn", "cpu-dgpu", "simulated")
    problem.backend.deterministic = False  # this instance only: its info carries the measured-env keys
    env = DevicePlacementEnv(problem=problem)
    placement = np.ones(env.num_groups, dtype=np.int64)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(placement)
    assert 0.0 < info["evaluation_s"] < 10.0 and info["evaluation_s"] == problem.last_evaluation_s
    env.reset(seed=0)
    _, again, _, _, repeat = env.step(placement)
    assert repeat["evaluation_s"] == 0.0 and again == reward  # a repeat costs nothing and changes nothing
    problem.evaluate_batch(np.stack([placement, np.zeros_like(placement)]))
    assert problem.last_evaluation_s is None  # several placements in one call are not timed one by one
    env.close()


def test_measured_info_carries_the_estimate_uncertainty_and_load():
    env = gym.make("DevicePlacement-v0", model="tiny_cnn", platform="local", backend="measured")
    env.reset(seed=0)
    action = env.action_space.sample()
    _, reward, _, _, info = env.step(action)
    assert info["feasible"] and info["latency_ci_ms"] > 0 and info["host_load"] >= 0
    assert info["latency_rel_ci"] == pytest.approx(info["latency_ci_ms"] / 1e3 / info["latency"])
    # the measurement's wall time: at least its timed runs; a result-cache hit costs next to nothing
    assert info["evaluation_s"] >= info["samples"] * info["latency"] * 0.5
    problem = env.unwrapped.problem
    problem.start_run()  # a new run forgets the memo: the backend's result cache answers
    env.reset(seed=0)
    _, again, _, _, cached = env.step(action)
    assert cached["cached"] and again == reward and cached["latency"] == info["latency"]
    assert 0.0 <= cached["evaluation_s"] < min(0.05, info["evaluation_s"])
    env.close()


def test_bad_actions_raise_clear_errors(sim_env):
    sim_env.reset(seed=0)
    g = sim_env.unwrapped.num_groups
    with pytest.raises(PlacementError, match=rf"shape \({g},\)"):
        sim_env.step(np.zeros(g + 1, dtype=np.int64))
    with pytest.raises(PlacementError, match="integer"):
        sim_env.step(np.zeros(g, dtype=np.float32))
    with pytest.raises(PlacementError, match="out of range"):
        sim_env.step(np.full(g, 5))
    with pytest.raises(PlacementError, match="out of range"):
        sim_env.step(np.full(g, -1))


@pytest.mark.parametrize(
    "kwargs, kind",
    [
        ({"model": "tiny_cnnn"}, "model"),
        ({"platform": "cpu-dgpuu"}, "platform"),
        ({"backend": "simulatd"}, "backend"),
        ({"coarsening": "fusd"}, "coarsening level"),
        ({"mode": "seq"}, "mode"),
        ({"reward": "speed"}, "reward"),
    ],
)
def test_unknown_names_list_valid_ones(kwargs, kind):
    with pytest.raises(UnknownNameError, match=f"unknown {kind}") as err:
        DevicePlacementEnv(**{**TINY_SIM, **kwargs})
    assert "known:" in str(err.value)


def test_sequential_matches_oneshot():
    seq = DevicePlacementEnv(**TINY_SIM, mode="sequential")
    one = DevicePlacementEnv(**TINY_SIM)
    seq.reset(seed=0)
    one.reset(seed=0)
    placement = np.arange(seq.num_groups) % seq.num_devices
    for t, dev in enumerate(placement):
        mask = seq.action_masks()
        assert mask.shape == (seq.num_devices,) and mask[dev]
        obs, reward, terminated, _, info = seq.step(int(dev))
        assert terminated == (t == seq.num_groups - 1)
        if not terminated:
            assert reward == 0.0 and obs["current_node"][t + 1] == 1.0
    _, ref, _, _, _ = one.step(placement)
    assert np.isclose(reward, ref)
    with pytest.raises(PlacementError, match="reset"):
        seq.step(0)


def test_incremental_sequential_rewards_sum_to_final_minus_initial():
    env = DevicePlacementEnv(**TINY_SIM, mode="sequential", sequential_reward="incremental")
    env.reset(seed=0)
    start = env.problem.evaluate(np.full(env.num_groups, env.problem.platform.host)).reward
    total = sum(env.step(int(g % env.num_devices))[1] for g in range(env.num_groups))
    final = env.problem.evaluate(np.arange(env.num_groups) % env.num_devices).reward
    assert np.isclose(total, final - start)


def test_padding_and_masks():
    env = DevicePlacementEnv(**TINY_SIM, max_nodes=40, max_edges=60)
    obs, _ = env.reset(seed=0)
    g = env.num_groups
    assert obs["node_features"].shape[0] == 40 and obs["node_mask"].sum() == g
    assert obs["edge_mask"].sum() == env.problem.coarse.graph.num_edges
    assert env.observation_space.contains(obs)
    assert env.action_masks().shape == (40 * env.num_devices,)
    _, reward, _, _, info = env.step(np.zeros(40, dtype=np.int64))
    assert info["placement"].shape == (g,)
    with pytest.raises(ValueError, match="smaller than the graph"):
        DevicePlacementEnv(**TINY_SIM, max_nodes=2)


@pytest.mark.parametrize("initial", ["host", "best_single", "random"])
@pytest.mark.parametrize("max_nodes", [None, 40])
def test_observed_placement_is_the_current_one(initial, max_nodes):
    """``obs["placement"]`` is the one-hot of :attr:`placement` after reset and step (padding rows zero), and
    a caller writing into an observation changes no later one."""
    env = DevicePlacementEnv(**TINY_SIM, initial_placement=initial, max_nodes=max_nodes)
    g, d = env.num_groups, env.num_devices
    action = np.arange(env.max_nodes, dtype=np.int64) % d
    for _ in range(2):
        obs, _ = env.reset(seed=1)
        expected = np.zeros((env.max_nodes, d), dtype=np.float32)
        expected[np.arange(g), env.placement] = 1.0
        np.testing.assert_array_equal(obs["placement"], expected)
        obs["placement"][:] = 0.5  # the caller's array: the next reset's is unchanged
        obs, *_ = env.step(action)
        expected[:] = 0.0
        expected[np.arange(g), action[:g]] = 1.0
        np.testing.assert_array_equal(obs["placement"], expected)


def test_memory_mask_forbids_a_too_small_device():
    from dataclasses import replace

    from placement_gym.platforms import load_platform

    base = load_platform("cpu-dgpu")
    small = replace(base.devices[1], memory_bytes=1)  # the GPU can hold nothing
    platform = replace(base, devices=(base.devices[0], small))
    env = DevicePlacementEnv("tiny_cnn", platform, "simulated")
    mask = env.action_masks().reshape(env.num_groups, 2)
    assert mask[:, 0].all() and not mask[:, 1].any()
    env.reset(seed=0)
    _, reward, _, _, info = env.step(np.ones(env.num_groups, dtype=np.int64))
    assert not info["feasible"] and info["reason"] and reward == -1.0


def test_render_modes():
    env = DevicePlacementEnv(**TINY_SIM, render_mode="ansi")
    env.reset(seed=0)
    env.step(np.zeros(env.num_groups, dtype=np.int64))
    text = env.render()
    assert "latency:" in text and "group" in text


def test_ansi_render_shows_every_group_or_a_page_of_them():
    """A 206-group BERT placement shows all 206 rows (no silent cut at 40); a page says which it shows."""
    from placement_gym.envs.render import placement_table

    env = DevicePlacementEnv("bert", "cpu-igpu", "simulated", render_mode="ansi")
    env.reset(seed=0)
    env.step(np.arange(env.num_groups) % env.num_devices)
    rows = [line.split() for line in env.render().splitlines()[1:] if line.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == list(range(env.num_groups)) and env.num_groups == 206
    problem = env.problem
    page = placement_table(problem.coarse, problem.platform, env.placement, None, start=200, max_rows=40)
    assert [int(line.split()[0]) for line in page.splitlines()[1:7]] == list(range(200, 206))
    assert "groups 200-205 of 206" in page
    for bad in ({"start": 206}, {"start": -1}, {"max_rows": 0}, {"start": True}):
        with pytest.raises(PlacementGymError):
            placement_table(problem.coarse, problem.platform, env.placement, None, **bad)
    env = DevicePlacementEnv(**TINY_SIM, render_mode="rgb_array")
    env.reset(seed=0)
    img = env.render()
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3 and img.std() > 0


def test_pickle_round_trip_keeps_state():
    env = DevicePlacementEnv(**TINY_SIM, initial_placement="random")
    env.reset(seed=3)
    clone = pickle.loads(pickle.dumps(env))
    assert np.array_equal(clone.placement, env.placement)
    action = np.arange(env.num_groups) % env.num_devices
    assert clone.step(action)[1] == env.step(action)[1]
    assert clone.np_random.integers(1000) == env.np_random.integers(1000)


def test_vec_envs():
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    for cls in (DummyVecEnv, SubprocVecEnv):
        vec = make_vec_env(
            "placement_gym:DevicePlacement-v0", n_envs=2, seed=0, vec_env_cls=cls, env_kwargs=TINY_SIM
        )
        obs = vec.reset()
        assert obs["node_features"].shape[0] == 2
        actions = np.stack([vec.action_space.sample() for _ in range(2)])
        _, rewards, dones, infos = vec.step(actions)
        assert dones.all() and np.all(np.isfinite(rewards)) and "latency" in infos[0]
        vec.close()


@pytest.mark.slow
def test_ppo_multi_input_trains_on_sim_bert():
    from stable_baselines3 import PPO

    env = gym.make("DevicePlacementSim-bert-v0")
    model = PPO("MultiInputPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(256)
    action, _ = model.predict(env.reset(seed=0)[0], deterministic=True)
    assert env.action_space.contains(action)


def test_env_around_a_backend_instance_refuses_to_pickle_clearly():
    env = DevicePlacementEnv(**TINY_SIM)
    wrapped = DevicePlacementEnv(backend=env.problem.backend)
    assert wrapped.num_groups == env.num_groups
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(wrapped)
