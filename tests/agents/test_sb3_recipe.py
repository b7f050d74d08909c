"""The training recipe, the best-placement callback and the example script (tiny task)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from stable_baselines3 import A2C, PPO

from agents.sb3.callbacks import BestPlacementCallback
from agents.sb3.policy import GNNActorCriticPolicy, MaskableGNNActorCriticPolicy
from agents.sb3.recipe import ALGOS, MODES, recipe
from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import UnknownNameError
from placement_gym.problem import problem_of

pytestmark = pytest.mark.usefixtures("one_thread")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ppo_gnn.py"


def test_recipe_covers_every_mode_and_algo_and_returns_fresh_dicts():
    for mode in MODES:
        for algo in ALGOS:
            r = recipe(mode, algo)
            assert r.hyperparams["learning_rate"] > 0 and r.policy_kwargs["gnn"] == "sage"
            expected = MaskableGNNActorCriticPolicy if algo == "maskable_ppo" else GNNActorCriticPolicy
            assert r.policy is expected
    r = recipe("oneshot", "ppo")
    r.hyperparams["n_steps"] = 1
    r.policy_kwargs["features_extractor_kwargs"]["hidden"] = 1
    assert recipe("oneshot", "ppo").hyperparams["n_steps"] != 1
    assert recipe("oneshot", "ppo").policy_kwargs["features_extractor_kwargs"]["hidden"] == 64
    with pytest.raises(UnknownNameError, match="oneshot"):
        recipe("one-shot", "ppo")
    with pytest.raises(UnknownNameError, match="a2c"):
        recipe("oneshot", "dqn")


@pytest.mark.parametrize("algo_class, algo", [(PPO, "ppo"), (A2C, "a2c")])
def test_recipe_trains_and_callback_keeps_the_best(algo_class, algo):
    env = DevicePlacementEnv("tiny_cnn", "cpu-dgpu", "simulated", observation="device")
    seen = []
    problem_of(env).add_listener(lambda placement, evaluation: seen.append(evaluation.latency))
    r = recipe("oneshot", algo)
    r.policy_kwargs["features_extractor_kwargs"].update(hidden=16, layers=1)
    model = algo_class(r.policy, env, policy_kwargs=r.policy_kwargs, seed=0, **r.hyperparams)
    best = BestPlacementCallback()
    model.learn(total_timesteps=32, callback=best)
    # every step's info reaches the callback; the listener sees each distinct placement once (a repeat
    # is answered from the problem's memo, protocol's budget rule)
    assert best.evaluations >= 32 and 0 < len(seen) == problem_of(env).evaluations <= best.evaluations
    assert best.best_latency == min(seen)
    assert problem_of(env).evaluate(best.best_placement).latency == best.best_latency


@pytest.mark.parametrize("env_id", ["DevicePlacement-v0", "DevicePlacementSequential-v0"])
def test_example_script_trains_on_a_tiny_task(capsys, env_id):
    spec = importlib.util.spec_from_file_location("train_ppo_gnn", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main(["--env", env_id, "--model", "tiny_cnn", "--platform", "cpu-dgpu", "--steps", "32"])
    assert np.isfinite(out["latency"]) and out["placement"].ndim == 1
    assert "best latency" in capsys.readouterr().out


def test_one_shot_learning_rate_falls_with_the_budget():
    from agents.sb3.recipe import LR_REFERENCE_BUDGET, budget_learning_rate

    base = recipe("oneshot", "ppo").hyperparams["learning_rate"]
    assert budget_learning_rate(1) == budget_learning_rate(LR_REFERENCE_BUDGET) == base
    rates = [budget_learning_rate(b) for b in (500, 1000, 5000, 20000)]
    assert all(a > b for a, b in zip(rates, rates[1:]))
    assert budget_learning_rate(5000) == pytest.approx(2.51e-4, rel=1e-2)
    with pytest.raises(ValueError, match="budget=0"):
        budget_learning_rate(0)


@pytest.mark.parametrize(
    ("spec", "mode", "expected"),
    [
        ({}, "oneshot", 6.6e-4),  # the run's budget (1,000) sets the rate
        ({"learning_rate": 2e-3}, "oneshot", 2e-3),  # a rate the user gives is kept
        ({}, "sequential", 1e-3),  # measured on one-shot placement only
    ],
)
def test_ppo_gnn_trains_with_the_budgets_learning_rate(spec, mode, expected):
    import agents
    from agents.base import BudgetTracker

    env = DevicePlacementEnv(model="tiny_cnn", platform="cpu-dgpu", backend="simulated", mode=mode)
    method = agents.make_method("ppo_gnn", **spec)
    seen = {}
    make_model = method.make_model

    def spy(vec_env, seed):
        model = make_model(vec_env, seed)
        seen["lr"] = model.learning_rate
        raise StopIteration  # enough: the model is built

    method.make_model = spy
    with pytest.raises(StopIteration):
        method._place(env, BudgetTracker(problem_of(env), 1000), seed=0)
    assert seen["lr"] == pytest.approx(expected, rel=1e-2)
