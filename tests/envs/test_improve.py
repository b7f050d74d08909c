"""The improvement MDP (DevicePlacementImproveEnv): IDs, checkers, masks, rewards, counting, determinism."""

from __future__ import annotations

import dataclasses
import math
import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import placement_gym
from placement_gym.envs import DevicePlacementImproveEnv
from placement_gym.errors import ConfigError, PlacementError, UnknownNameError
from placement_gym.heuristics.common import allowed_devices
from placement_gym.heuristics.heft import heft_placement
from placement_gym.platforms import Platform, load_platform

ALL_MOVES = "single,class,segment,branch"
SIMULATED = [i for i in placement_gym.IMPROVE_IDS if not gym.spec(i).nondeterministic]


def tiny(platform: str | Platform = "multi-accel", **kwargs) -> DevicePlacementImproveEnv:
    return DevicePlacementImproveEnv("tiny_bert", platform, "simulated", **kwargs)


def small_npu() -> Platform:
    """``multi-accel`` with an 8 KiB NPU: 8 of tiny_bert's 46 groups may not use it (forbidden devices)."""
    p = load_platform("multi-accel")
    devices = tuple(
        dataclasses.replace(d, memory_bytes=8 * 1024) if d.name == "npu" else d for d in p.devices
    )
    return dataclasses.replace(p, devices=devices, name="multi-accel-small-npu")


def test_ids_cover_the_suite_and_the_held_out_tasks() -> None:
    expected = {
        placement_gym.improve_id(m, p)
        for m in placement_gym.BENCHMARK_MODELS
        for p in placement_gym.IMPROVE_PLATFORMS
    } | {
        placement_gym.improve_id(m, p)
        for m in placement_gym.HELD_OUT_MODELS
        for p in placement_gym.HELD_OUT_PLATFORMS
    } | {placement_gym.improve_id(m, p) for m, p in placement_gym.MASKED_TASK_PAIRS}
    assert len(expected) == 12 + 2 * len(placement_gym.HELD_OUT_MODELS) + 2 and set(SIMULATED) == expected
    assert placement_gym.improve_id("bert", "cpu-dgpu") == "DevicePlacementImprove-bert-cpu_dgpu-sim-v0"
    assert gym.spec("DevicePlacementImprove-v0").nondeterministic
    assert not set(placement_gym.IMPROVE_IDS) & set(placement_gym.ENV_IDS)  # the old IDs are unchanged


@pytest.mark.parametrize("env_id", SIMULATED + ["DevicePlacementImprove-v0"])
def test_check_env_every_id_on_tiny_model(env_id: str) -> None:
    """Both checkers (Gymnasium's includes its determinism and no-shared-data checks), tiny model swapped in;
    the measured generic ID is checked on the simulated backend."""
    extra = {"backend": "simulated"} if gym.spec(env_id).nondeterministic else {}
    env = gym.make(env_id, model="tiny_bert", **extra)
    gym_check_env(env.unwrapped)
    sb3_check_env(env.unwrapped, warn=False)
    env.close()


@pytest.mark.parametrize("platform", ["cpu-igpu", "model-parallel"])
def test_check_env_with_every_move_kind_and_padding(platform: str) -> None:
    env = tiny(platform, moves=ALL_MOVES, max_nodes=60, max_edges=80, max_moves=300, max_move_size=16)
    gym_check_env(env)
    sb3_check_env(env, warn=False)
    assert env.action_space.n == 300 * env.num_devices
    assert env.observation_space["move_members"].shape == (300, 16)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", SIMULATED)
def test_check_env_every_id(env_id: str) -> None:
    env = gym.make(env_id)
    gym_check_env(env.unwrapped)
    sb3_check_env(env.unwrapped, warn=False)
    _, info = env.reset(seed=0)
    assert math.isfinite(info["start_latency"]) and info["baseline_latency"] > 0
    if "score" in info:  # a stored reference optimum: HEFT's latency is stored with it
        assert info["start_latency"] == env.unwrapped.problem.reference.heft_latency


def legal(env: DevicePlacementImproveEnv, action: int) -> bool:
    """A move is legal when every member may use the device and it changes the placement."""
    s, d = divmod(action, env.num_devices)
    if s >= len(env._members) or not len(env._members[s]):
        return False
    members = env._members[s]
    allowed = allowed_devices(env.problem)
    return bool(allowed[members, d].all() and (env.placement[members] != d).any())


@pytest.mark.parametrize("platform", ["cpu-igpu", "small-npu"])
@pytest.mark.parametrize("moves", ["single", ALL_MOVES])
def test_masks_allow_every_legal_move_and_only_those(platform: str, moves: str) -> None:
    env = tiny(
        small_npu() if platform == "small-npu" else platform, moves=moves, max_nodes=50, start="random"
    )
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    for _ in range(5):
        mask = env.action_masks()
        assert mask.shape == (env.action_space.n,) and mask.dtype == bool and mask.any()
        expected = np.array([legal(env, a) for a in range(env.action_space.n)])
        np.testing.assert_array_equal(mask, expected)
        padding = mask.reshape(env.num_moves, env.num_devices)[env.num_groups : env.max_nodes]
        assert not padding.any()
        env.step(int(rng.choice(np.flatnonzero(mask))))


def test_a_masked_move_is_a_no_op_or_infeasible() -> None:
    """With memory that forbids some devices, every masked action leaves the placement as it was."""
    env = tiny(small_npu(), moves=ALL_MOVES, max_nodes=50, start="random")
    assert not allowed_devices(env.problem).all()  # the test needs forbidden devices
    env.reset(seed=0)
    start = env.placement.copy()
    for a in np.flatnonzero(~env.action_masks()):
        env.reset(options={"placement": start})
        _, reward, _, _, info = env.step(int(a))
        np.testing.assert_array_equal(env.placement, start)
        assert reward == (0.0 if info["feasible"] else env.infeasible_reward)


def test_reward_is_the_log_latency_ratio_and_infeasible_moves_are_undone() -> None:
    env = tiny("model-parallel", moves=ALL_MOVES, infeasible_reward=-2.5)
    _, info = env.reset(seed=0)
    start = env.placement.copy()
    seen = {True: 0, False: 0}
    for a in range(env.action_space.n):
        env.reset(options={"placement": start})
        prev = env.problem.evaluate(start).latency
        _, reward, terminated, truncated, info = env.step(a)
        assert not terminated and not truncated
        seen[info["feasible"]] += 1
        if info["feasible"]:
            assert reward == pytest.approx(math.log(prev / info["latency"]), rel=1e-12)
            assert info["current_latency"] == info["latency"]
        else:
            assert reward == -2.5 and info["latency"] == math.inf and "out of memory" in info["reason"]
            np.testing.assert_array_equal(env.placement, start)
            assert info["current_latency"] == prev
    assert seen[True] and seen[False]


def test_each_step_is_one_counted_evaluation() -> None:
    env = tiny("multi-accel")
    env.reset(seed=0)
    problem = env.problem
    before = problem.evaluations
    for g in range(10):  # each step a placement never evaluated before
        device = int((env.placement[g] + 1) % env.num_devices)
        env.step(g * env.num_devices + device)
        assert problem.evaluations == before + g + 1
    # only the problem counts: the env keeps no evaluation memo of its own
    assert not any("count" in k or "memo" in k or "cache" in k for k in vars(env))


def run_episode(env: gym.Env, seed: int, steps: int) -> list:
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    out = [(obs, info)]
    for _ in range(steps):
        action = int(rng.choice(np.flatnonzero(env.unwrapped.action_masks())))
        out.append(env.step(action))
    return out


def test_deterministic_given_seed_and_actions_whatever_ran_before() -> None:
    """Nothing in obs or info depends on earlier episodes (caches, counters): a used env and a fresh one agree."""
    from gymnasium.utils.env_checker import data_equivalence

    used = tiny(start="random", moves=ALL_MOVES, max_steps=30)
    for seed in (5, 6):
        run_episode(used, seed, 30)
    fresh = tiny(start="random", moves=ALL_MOVES, max_steps=30)
    assert data_equivalence(run_episode(used, 7, 30), run_episode(fresh, 7, 30))
    assert data_equivalence(run_episode(used, 7, 30), run_episode(used, 7, 30))


def test_best_in_info_is_the_best_seen_and_truncation() -> None:
    env = tiny("cpu-igpu", moves=ALL_MOVES, start="random", max_steps=40)
    _, info = env.reset(seed=3)
    best = info["start_latency"]
    rng = np.random.default_rng(3)
    for step in range(1, 41):
        _, _, terminated, truncated, info = env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))
        best = min(best, info["latency"])
        assert info["best_latency"] == best and info["steps"] == step
        assert env.problem.evaluate(info["best_placement"]).latency == best
        assert not terminated and truncated == (step == 40)
    with pytest.raises(PlacementError, match="reset"):
        env.step(0)


def test_starts() -> None:
    env = tiny("multi-accel")
    _, info = env.reset(seed=0)
    heft, _ = heft_placement(env.problem.cost_model(), allowed_devices(env.problem))
    np.testing.assert_array_equal(info["placement"], heft)
    _, info = env.reset(options={"start": "best_single"})
    np.testing.assert_array_equal(info["placement"], env.problem.baseline_placement)
    assert info["start_latency"] == info["baseline_latency"] == info["best_latency"]
    _, a = env.reset(seed=1, options={"start": "random"})
    _, b = env.reset(seed=1, options={"start": "random"})
    np.testing.assert_array_equal(a["placement"], b["placement"])
    p = np.arange(env.num_groups) % env.num_devices
    obs, info = env.reset(options={"placement": p})
    np.testing.assert_array_equal(info["placement"], p)
    np.testing.assert_array_equal(obs["placement"][np.arange(env.num_groups), p], 1.0)


def test_bad_reset_options_and_actions_raise_clear_errors() -> None:
    env = tiny("model-parallel")
    g = env.num_groups
    with pytest.raises(PlacementError, match=rf"shape \({g},\)"):
        env.reset(options={"placement": [0] * (g + 1)})
    with pytest.raises(PlacementError, match="out of range"):
        env.reset(options={"placement": [7] * g})
    with pytest.raises(PlacementError, match="infeasible.*out of memory"):
        env.reset(options={"placement": [1] * g})  # no device of model-parallel holds the model
    with pytest.raises(ConfigError, match="unknown reset option"):
        env.reset(options={"placment": [0] * g})
    with pytest.raises(UnknownNameError, match="unknown start"):
        env.reset(options={"start": "hefty"})
    env.reset(seed=0)
    for bad in (env.action_space.n, -1, 1.5, [1, 2]):
        with pytest.raises(PlacementError):
            env.step(bad)
    with pytest.raises(UnknownNameError, match="move kind"):
        tiny(moves="single,window")
    with pytest.raises(ConfigError, match="single"):
        tiny(moves="class")
    with pytest.raises(ConfigError, match="max_steps"):
        tiny(max_steps=0)


def test_pickles_mid_episode() -> None:
    env = tiny(moves=ALL_MOVES)
    env.reset(seed=0)
    env.step(int(np.flatnonzero(env.action_masks())[0]))
    copy = pickle.loads(pickle.dumps(env))
    np.testing.assert_array_equal(copy.placement, env.placement)
    a = int(np.flatnonzero(env.action_masks())[3])
    assert copy.step(a)[1] == env.step(a)[1]


def test_maskable_ppo_trains_with_action_masks() -> None:
    from sb3_contrib import MaskablePPO

    env = gym.make(
        placement_gym.improve_id("bert", "multi-accel"), model="tiny_bert", moves=ALL_MOVES, max_steps=16
    )
    model = MaskablePPO("MultiInputPolicy", env, n_steps=32, batch_size=16, n_epochs=1, seed=0, device="cpu")
    model.learn(64)
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, action_masks=env.unwrapped.action_masks(), deterministic=True)
    assert env.unwrapped.action_masks()[int(action)]
