"""guided_ppo: the move-feature observation, the policy on two graph sizes, MaskablePPO with masks, the
ranker in the search, the policy file, the method within its budget."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from agents import make_method
from agents.learned.moves import MOVE_FEATURES, MoveFeaturizer, Moves
from agents.sb3.guided_policy import PolicyRanker
from agents.sb3.guided_ppo import (
    DEFAULT_ARCH,
    METHOD,
    PPO_KWARGS,
    improve_env,
    ppo_model,
    resolve_policy,
    shipped_policies,
)
from agents.sb3.move_observation import MoveFeatureObservation
from agents.sb3.policy_file import read_transfer_policy, write_transfer_policy
from agents.sb3.transfer_policy import transfer_weights
from placement_gym.envs import DevicePlacementEnv
from placement_gym.errors import PlacementGymError, UnknownNameError
from placement_gym.problem import PlacementProblem

COST = {"env_steps": 0, "evaluations": 0, "wall_s": 0.0, "cpu_s": 0.0, "cores": 1, "command": "test"}


@pytest.fixture
def problem(tiny_bert):
    return PlacementProblem.make(tiny_bert, "multi-accel", "simulated")


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory, tiny_cnn):
    """Initial weights of a policy, written in the safe format."""
    torch.manual_seed(0)
    model = ppo_model(improve_env(PlacementProblem.make(tiny_cnn, "cpu-igpu", "simulated"), 8), None, 16, 0)
    state = model.policy.state_dict()
    return write_transfer_policy(
        tmp_path_factory.mktemp("policy") / "p", state, DEFAULT_ARCH, PPO_KWARGS, COST, method=METHOD
    )


def test_wrapper_adds_the_features_of_every_allowed_action(problem):
    env = improve_env(problem, 8)
    check_env(env.unwrapped, skip_render_check=True)  # the env itself
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    features = obs["move_features"]
    m, d = env.unwrapped.num_moves, env.unwrapped.num_devices
    assert features.shape == (m, d, len(MOVE_FEATURES))
    masks = env.action_masks().reshape(m, d)
    assert not features[~masks].any() and features[masks].any()
    s, dev = np.argwhere(masks)[-1]  # the last allowed action: a set beyond the singles
    move = Moves(env.set_members[[s]], np.array([dev]), env.set_kinds[[s]])
    expected = MoveFeaturizer(problem.cost_model()).features(env.unwrapped.placement, info["latency"], move)
    np.testing.assert_allclose(features[s, dev], expected[0])
    obs, *_ = env.step(int(np.flatnonzero(env.action_masks())[0]))
    assert env.observation_space.contains(obs)


def test_wrapper_needs_the_improvement_env(tiny_cnn):
    with pytest.raises(PlacementGymError, match="DevicePlacementImproveEnv"):
        MoveFeatureObservation(DevicePlacementEnv(tiny_cnn, "cpu-igpu", "simulated"))


def test_one_policy_scores_graphs_of_two_sizes(tiny_cnn, tiny_bert, one_thread):
    models = []
    for bench, platform in ((tiny_cnn, "cpu-igpu"), (tiny_bert, "multi-accel")):
        env = improve_env(PlacementProblem.make(bench, platform, "simulated"), 8)
        models.append((env, ppo_model(env, None, 16, 0)))
    (env_a, a), (env_b, b) = models
    assert env_a.unwrapped.num_groups != env_b.unwrapped.num_groups
    transfer_weights(a.policy.state_dict(), b.policy)  # no weight depends on the sizes
    obs, _ = env_b.reset(seed=0)
    tensor, _ = b.policy.obs_to_tensor(obs)
    with torch.no_grad():
        logits = b.policy.mlp_extractor.forward_actor(b.policy.extract_features(tensor))[0]
        value = b.policy.predict_values(tensor)
    assert logits.shape == (env_b.action_space.n,) and value.shape == (1, 1)
    masks = env_b.action_masks()
    action, _ = b.predict(obs, action_masks=masks, deterministic=True)
    assert masks[int(action)]


def test_maskable_ppo_learns_with_masks(problem, one_thread):
    model = ppo_model(improve_env(problem, 8), None, 16, 0, batch_size=8)
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(32)
    assert model.num_timesteps >= 32
    assert any(not torch.equal(p, q) for p, q in zip(before, model.policy.parameters()))


def test_ranker_scores_every_move_kind_and_needs_a_visit(problem, policy_dir):
    saved = read_transfer_policy(policy_dir, method=METHOD)
    arch = saved.meta.arch
    ranker = PolicyRanker.from_state(problem, saved.policy_state, arch.extractor.hidden,
                                     arch.extractor.layers, list(arch.head))  # fmt: skip
    from agents.baselines.common import allowed_devices
    from agents.learned.moves import branch_sets, propose, twin_classes

    cost = problem.cost_model()
    placement = np.zeros(problem.num_groups, dtype=np.int64)
    moves = propose(placement, allowed_devices(problem), twin_classes(cost), branch_sets(cost))
    features = MoveFeaturizer(cost).features(placement, 1e-3, moves)
    with pytest.raises(PlacementGymError, match="visit"):
        ranker.scores(features, moves)
    ranker.visit(placement, 1e-3, moves, features)
    scores = ranker.scores(features, moves)
    assert scores.shape == (len(moves),) and np.isfinite(scores).all()
    assert len(np.unique(scores)) > 1


def test_places_within_the_budget_seeded(problem, tiny_bert, policy_dir):
    result = make_method("guided_ppo", policy=str(policy_dir)).place(problem, budget=40, seed=0)
    assert result.evaluations <= 40 and np.isfinite(result.latency)
    assert result.extra["pretraining"]["command"] == "test" and result.extra["fine_tune_evaluations"] == 0
    again = make_method("guided_ppo", policy=str(policy_dir)).place(
        PlacementProblem.make(tiny_bert, "multi-accel", "simulated"), budget=40, seed=0
    )
    assert again.latency == result.latency


def test_fine_tuning_counts_against_the_budget(problem, policy_dir, one_thread):
    result = make_method("guided_ppo", policy=str(policy_dir), fine_tune=12).place(problem, budget=40, seed=0)
    assert result.evaluations <= 40 and result.extra["fine_tune_evaluations"] >= 12
    with pytest.raises(PlacementGymError, match="budget"):
        make_method("guided_ppo", policy=str(policy_dir), fine_tune=39).place(problem, budget=40)


def test_rejects_bad_arguments():
    with pytest.raises(PlacementGymError, match="fine_tune"):
        make_method("guided_ppo", fine_tune=-1)
    with pytest.raises(UnknownNameError, match="tabu"):
        make_method("guided_ppo", tabu="forever")
    with pytest.raises(UnknownNameError):
        resolve_policy("nope", "bert")
    with pytest.raises(UnknownNameError, match="imitation"):
        make_method("guided_ppo", stage="final")


def test_policy_file_round_trip_and_refusals(tmp_path, policy_dir):
    saved = read_transfer_policy(policy_dir, method=METHOD)
    again = write_transfer_policy(
        tmp_path / "copy", saved.policy_state, DEFAULT_ARCH, PPO_KWARGS, COST, method=METHOD
    )
    copy = read_transfer_policy(again, method=METHOD)
    assert saved.policy_state.keys() == copy.policy_state.keys()
    assert all(torch.equal(saved.policy_state[k], copy.policy_state[k]) for k in saved.policy_state)
    with pytest.raises(PlacementGymError, match="not a pretrained_ppo one"):
        read_transfer_policy(again)  # a guided_ppo policy is not pretrained_ppo's
    (again / "weights.pt").write_bytes(b"not a torch archive")
    with pytest.raises(PlacementGymError, match="not a readable"):
        read_transfer_policy(again, method=METHOD)


#: The command that trains the shipped policies (those trained before ``experiments/`` had subpackages
#: record the module's old path, as docs/guided-ppo.md says).
TRAINED_BY = ("python -m experiments.pretraining.guided_ppo", "python -m experiments.pretrain_guided_ppo")


def test_shipped_policies_keep_each_model_out():
    names = shipped_policies()
    if not names:
        pytest.skip("no guided_ppo policy shipped")
    assert {"all", "untrained"} <= set(names)
    for model in ("bert", "resnet50", "inception_v3"):
        path = resolve_policy("auto", model)
        assert path.name == f"no-{model}"
        training = read_transfer_policy(path, method=METHOD).meta.training
        assert model not in training.models
        assert training.command.startswith(TRAINED_BY)
    assert resolve_policy("auto", "vit_b16").name == "all"
    assert resolve_policy("auto", "bert", "imitation").name == "no-bert-imitation"
    assert resolve_policy("untrained", "bert", "imitation").name == "untrained"
