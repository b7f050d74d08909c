"""Agents that step an env in the protocol: ``train(env|envs, budget, seed)``, SB3 algorithms by spec, the
budget enforced inside the env (truncation + ``info["budget_exhausted"]``), and specs as text in evaluate."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from agents.specs import parse_spec
from placement_gym import errors
from placement_gym.benchmark import evaluate
from placement_gym.budget import Run
from placement_gym.env_agents import BudgetState, BudgetWrapper, env_options, is_env_agent
from placement_gym.errors import BudgetExhaustedError, ConfigError, UnknownNameError

TINY = ["tiny_cnn/cpu-dgpu"]


def _random_steps(env, budget, seed, log=None):
    """Steps random placements until the env says the budget is spent; logs every step's outcome."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    problem = env.unwrapped.problem
    for _ in range(10_000):
        action = rng.integers(0, problem.num_devices, env.action_space.shape)
        before = problem.evaluations
        obs, reward, terminated, truncated, info = env.step(action)
        if log is not None:
            log.append((truncated, dict(info), problem.evaluations - before))
        if info.get("budget_exhausted"):
            return None
        if terminated or truncated:
            env.reset()
    raise AssertionError("the env never said the budget was spent")


def test_a_spent_budget_truncates_the_episode_and_nothing_more_is_evaluated():
    log: list = []

    def train(env, budget, seed):
        _random_steps(env, budget, seed, log)
        for _ in range(3):  # steps after the flag: truncated again, nothing evaluated
            before = env.unwrapped.problem.evaluations
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            assert truncated and info["budget_exhausted"] and reward == 0.0 and not terminated
            assert env.unwrapped.problem.evaluations == before
            assert env.observation_space.contains(obs)

    (row,) = evaluate(train, tasks=TINY, budget=6, seeds=[0])
    assert row.evaluations == 6 and row.extra == {"stopped_by_budget": True, "stalled": False, "env_steps": 6}
    assert row.method.endswith(".train") and np.isfinite(row.latency)
    assert row.placement is not None and len(row.placement) == row.groups
    last = log[-1]
    assert last[0] is True and last[1]["budget_exhausted"] is True and "stalled" not in last[1]
    assert all(not t and "budget_exhausted" not in i for t, i, _ in log[:-1])


def test_the_returned_placement_or_else_the_runs_best_is_scored():
    seen: list = []

    def train(env, budget, seed):
        _random_steps(env, budget, seed)
        seen.append(env.unwrapped.problem)

    (row,) = evaluate(train, tasks=TINY, budget=5, seeds=[0])
    assert row.latency == min(lat for _, lat in row.history)  # the best of the run
    mine = evaluate(lambda env, budget, seed: [0] * env.unwrapped.num_groups, tasks=TINY, budget=5, seeds=[0])
    assert mine[0].placement == [0] * mine[0].groups and mine[0].evaluations == 0


def test_a_vector_env_of_num_envs_copies_shares_one_budget():
    shapes = []

    def train(envs, budget, seed, num_envs: int = 3):
        assert isinstance(envs, gym.vector.SyncVectorEnv) and envs.num_envs == num_envs
        envs.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for _ in range(1000):
            n = envs.single_action_space.nvec
            obs, reward, terminated, truncated, infos = envs.step(rng.integers(0, n, (num_envs, len(n))))
            shapes.append(reward.shape)
            if infos.get("budget_exhausted", np.zeros(1, bool)).any():
                assert truncated[infos["_budget_exhausted"]].all()
                return None
        raise AssertionError("never exhausted")

    (row,) = evaluate(train, tasks=TINY, budget=7, seeds=[0])
    assert row.evaluations == 7 and row.extra["stopped_by_budget"] and shapes[0] == (3,)
    # the spec's num_envs reaches the env the protocol builds
    assert env_options(parse_spec("tests.test_env_agents:_vector_train:num_envs=2").build()).num_envs == 2


def _vector_train(envs, budget, seed, num_envs: int = 4):
    return None


class _Stalled(BudgetExhaustedError):
    pass


class _RaisingEnv(gym.Env):
    observation_space = spaces.Box(0, 1, (2,))
    action_space = spaces.Discrete(2)

    def __init__(self, error):
        self.error = error

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        raise self.error


@pytest.mark.parametrize("stalled", [False, True])
def test_the_exception_of_a_spent_or_stalled_run_never_reaches_the_learner(monkeypatch, stalled):
    monkeypatch.setattr(errors, "RunStalledError", getattr(errors, "RunStalledError", _Stalled), raising=False)
    error = errors.RunStalledError("stalled") if stalled else BudgetExhaustedError("spent")
    run = type("R", (), {"exhausted": False, "budget": 3})()
    env = BudgetWrapper(_RaisingEnv(error), BudgetState(run))  # type: ignore[arg-type]
    env.reset()
    for _ in range(2):
        obs, reward, terminated, truncated, info = env.step(0)
        assert truncated and info["budget_exhausted"] and info.get("stalled", False) is stalled
    assert env.reset()[1]["budget_exhausted"]


def test_what_makes_an_env_agent():
    def place(problem, budget, seed):
        return None

    def train(env, budget, seed):
        return None

    class Learner:
        def train(self, envs, budget, seed):
            return None

    assert is_env_agent(train) and is_env_agent(Learner) and is_env_agent(Learner())
    assert not is_env_agent(place) and not is_env_agent(lambda problem, budget, seed: None)
    assert env_options(Learner).vector and not env_options(train).vector
    with pytest.raises(UnknownNameError, match="observation"):
        env_options(lambda env, budget, seed, observation="pixels": None)
    with pytest.raises(ConfigError, match="num_envs"):
        env_options(lambda envs, budget, seed, num_envs=0: None)


# ---------------------------------------------------------------------- Stable-Baselines3 by spec
def test_sb3_specs_are_checked_and_normalised():
    spec = parse_spec("stable_baselines3:PPO:n_steps=16,learning_rate=1e-3,batch_size=16")
    assert spec.text == "stable_baselines3:PPO:learning_rate=0.001,n_steps=16,batch_size=16"
    spec = parse_spec(
        'stable_baselines3:PPO:policy=agents.sb3.policy:GNNActorCriticPolicy,policy_kwargs={"gnn":"sage"}'
    )
    from agents.sb3.policy import GNNActorCriticPolicy

    agent = spec.build()
    assert agent.policy is GNNActorCriticPolicy and agent.policy_kwargs == {"gnn": "sage"}
    assert parse_spec("sb3_contrib:MaskablePPO:observation=device").build().observation == "device"
    for bad, error, match in [
        ("stable_baselines3:PPO:env=x", ConfigError, "env= cannot be given"),
        ("stable_baselines3:PPO:seed=3", ConfigError, "seed= cannot be given"),
        ("stable_baselines3:PPO:n_step=16", UnknownNameError, "n_steps"),
        ("stable_baselines3:PPO:n_steps=-1", ConfigError, "n_steps"),
        ("stable_baselines3:PPO:mdp=pixels", UnknownNameError, "mdp"),
        ("stable_baselines3.common.base_class:BaseAlgorithm", ConfigError, "abstract"),
    ]:
        with pytest.raises(error, match=match):
            parse_spec(bad)


def test_an_sb3_algorithm_learns_until_the_budget_is_spent(monkeypatch):
    (row,) = evaluate(
        "stable_baselines3:PPO:n_steps=8,batch_size=8,n_epochs=1", tasks=TINY, budget=10, seeds=[0]
    )
    assert row.method == "stable_baselines3:PPO:n_steps=8,batch_size=8,n_epochs=1"
    assert row.evaluations == 10 and row.extra == {"stopped_by_budget": True, "stalled": False, "env_steps": 10}


def test_maskable_ppo_gets_the_action_masks(monkeypatch):
    calls = []
    original = BudgetWrapper.action_masks

    def counted(self):
        calls.append(1)
        return original(self)

    monkeypatch.setattr(BudgetWrapper, "action_masks", counted)
    (row,) = evaluate("sb3_contrib:MaskablePPO:n_steps=8,batch_size=8,n_epochs=1", tasks=TINY, budget=6, seeds=[0])
    assert row.evaluations == 6 and len(calls) >= 6


def test_registered_names_work_in_evaluate_as_in_the_cli():
    (heft,) = evaluate("heft", tasks=TINY, budget=5, seeds=[0])
    assert heft.method == "heft" and np.isfinite(heft.latency)
    (milp,) = evaluate("milp:time_limit=30.0", tasks=TINY, budget=5, seeds=[0])
    assert milp.method == "milp:time_limit=30"
    with pytest.raises(UnknownNameError, match="heft"):
        evaluate("hetf", tasks=TINY, budget=5, seeds=[0])


def test_a_run_counts_env_steps_through_the_problem():
    from placement_gym.problem import PlacementProblem

    problem = PlacementProblem.make("tiny_cnn", "cpu-dgpu", "simulated")
    run = Run(problem, 2)
    try:
        from placement_gym.env_agents import EnvOptions, make_env

        env = make_env(problem, EnvOptions(), BudgetState(run))
        infos = []
        for d in (0, 1, 0):
            env.reset(seed=0)
            infos.append(env.step(np.full(problem.num_groups, d))[4])
        assert run.used == 2 and infos[1]["budget_exhausted"] and "budget_exhausted" not in infos[0]
        assert "latency" in infos[1] and "latency" not in infos[2]
    finally:
        run.detach()
        problem.close()


# ---------------------------------------------------------------------- the two worked examples
@pytest.fixture
def examples_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "examples"))


def test_the_torch_ppo_example_runs_on_the_tiny_tier(examples_on_path):
    import ppo_torch

    (row,) = evaluate(ppo_torch.train, tasks=["resnet50/cpu-dgpu"], tier="tiny", seeds=[0])
    assert row.tier == "tiny" and row.evaluations == row.budget and row.extra["stopped_by_budget"]
    assert np.isfinite(row.score) and row.latency == min(lat for _, lat in row.history)
    assert len(Path(ppo_torch.__file__).read_text().splitlines()) < 300


def test_the_sb3_example_runs_on_the_tiny_tier(examples_on_path):
    from sb3_algorithm import SPEC

    (row,) = evaluate(SPEC, tasks=["resnet50/cpu-dgpu"], tier="tiny", seeds=[0])
    assert row.method == SPEC and row.evaluations == row.budget and row.extra["stopped_by_budget"]
    assert np.isfinite(row.score)


def test_an_env_that_reads_the_cost_model_runs_white_box_only():
    from placement_gym.errors import AgentFailedError

    def train(env, budget, seed, observation="device"):
        env.reset(seed=seed)
        env.step(np.zeros(env.action_space.shape, dtype=np.int64))

    with pytest.raises(AgentFailedError, match="ProtocolAccessError: problem.device_features"):
        evaluate(train, tasks=TINY, budget=3, seeds=[0])  # black-box by default
    train.track = "white-box"
    (row,) = evaluate(train, tasks=TINY, budget=3, seeds=[0])
    assert row.track == "white-box" and row.evaluations == 1
    assert parse_spec("stable_baselines3:PPO:observation=device").build().track == "white-box"
    assert parse_spec("sb3_contrib:MaskablePPO:mdp=improve").build().track == "white-box"
    assert parse_spec("stable_baselines3:PPO").build().track == "black-box"
