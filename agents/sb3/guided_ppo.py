"""``guided_ppo``: the guided improvement search, ranked by a MaskablePPO GNN policy trained in the simulator.

The search is ``guided_improvement``'s (:func:`agents.learned.search.guided_search`, with the same
defaults: start from the best of HEFT and the single devices, batches of 4, a tabu list, 96 ranked moves
per placement, walks within 2% of the best, kicks of 2 moves); the order in which it tries the moves
(single groups, twin classes, segments, windows, fork-join branches) comes from the logits of a
:class:`~agents.sb3.guided_policy.GuidedPPOPolicy` (:class:`~agents.sb3.guided_policy.PolicyRanker`: the
higher a move's logit, the earlier it is tried). That policy scores a move from its cost-model features
(:data:`~agents.learned.moves.MOVE_FEATURES`), the mean GNN embedding of its groups and its target
device's descriptor; no weight depends on the graph or the platform, so one policy serves every task.

It is trained offline by ``python -m experiments.pretraining.guided_ppo`` over zoo models on perturbed
platforms: first by imitation (every move of each visited placement simulated; the logits fitted
listwise to the true relative latency changes), then by MaskablePPO on the improvement MDP with the
move features in the observation (:class:`~agents.sb3.move_observation.MoveFeatureObservation`). The
budget counts only the target task's evaluations (``fine_tune`` included); the training cost is in the
result's ``extra["pretraining"]``.

Shipped policies (``agents/sb3/pretrained-guided/<name>/``, the safe format of
:mod:`agents.sb3.policy_file`): ``all`` (trained on the three suite models, the two tiny ones and the
pretraining-only families :data:`placement_gym.zoo.PRETRAIN_MODELS`), ``no-<model>`` (the same without
``<model>``: leave-one-model-out), ``untrained`` (the initial weights: the control), and
``<name>-imitation`` (the weights before the PPO stage, for the ablation ``stage="imitation"``).
``policy="auto"`` picks ``no-<model>`` on a suite model, else ``all``.

Example::

    result = make_method("guided_ppo").place(PlacementProblem.make("vit_b16", "multi-accel"), budget=100)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agents.base import BudgetTracker, PlacementMethod
from agents.determinism import deterministic_torch
from agents.learned.guided import TABUS
from agents.learned.search import guided_search
from agents.sb3.guided_policy import GuidedPPOPolicy, PolicyRanker
from agents.sb3.move_observation import MoveFeatureObservation
from agents.sb3.policy_file import (
    TransferPolicyFile,
    policy_folder,
    read_transfer_policy,
    shipped_policy_names,
)
from agents.sb3.pretrained_ppo import StopAtEvaluations
from agents.sb3.transfer_policy import transfer_weights
from placement_gym import BENCHMARK_MODELS
from placement_gym.envs import DevicePlacementImproveEnv
from placement_gym.errors import PlacementGymError, UnknownNameError
from placement_gym.problem import PlacementProblem

METHOD = "guided_ppo"
#: Folder of the shipped policies.
PRETRAINED_DIR = Path(__file__).with_name("pretrained-guided")
#: Architecture of the shipped policies.
DEFAULT_ARCH: dict[str, Any] = {"extractor": {"hidden": 32, "layers": 3}, "head": [64, 64]}
#: MaskablePPO hyperparameters of training and fine-tuning (``n_steps`` is set per use).
PPO_KWARGS: dict[str, Any] = {
    "learning_rate": 1e-4,
    "batch_size": 64,
    "n_epochs": 4,
    "gamma": 0.9,
    "gae_lambda": 0.9,
    "ent_coef": 0.0,
}
#: Weights of a shipped trained policy: after its PPO stage (the method) or after imitation (the ablation).
STAGES = ("ppo", "imitation")
#: Move kinds of the improvement env the policy is trained and fine-tuned on.
ENV_MOVES = "single,class,segment,branch"


def shipped_policies() -> list[str]:
    """Names of the policies shipped in :data:`PRETRAINED_DIR`."""
    return shipped_policy_names(PRETRAINED_DIR)


def resolve_policy(policy: str, model: str, stage: str = "ppo") -> Path:
    """The folder of ``policy`` (a shipped name, ``"auto"``, or a path) for a task of ``model``; with
    ``stage="imitation"`` a shipped trained policy's imitation-stage weights (``<name>-imitation``).

    Raises:
        UnknownNameError: For a name that is neither shipped nor a folder, or an unknown stage.
    """
    if stage not in STAGES:
        raise UnknownNameError("guided_ppo stage", stage, STAGES)
    if policy == "auto":
        policy = f"no-{model}" if model in BENCHMARK_MODELS else "all"
    if stage == "imitation" and policy != "untrained" and (PRETRAINED_DIR / policy).is_dir():
        policy = f"{policy}-imitation"
    return policy_folder(policy, PRETRAINED_DIR, "guided_ppo policy (a shipped name or a folder)")


def ppo_model(env: gym.Env, saved: TransferPolicyFile | None, n_steps: int, seed: int, **ppo: Any):
    """A MaskablePPO model of :class:`GuidedPPOPolicy` on ``env`` (a :class:`MoveFeatureObservation`),
    with ``saved``'s architecture and weights (``None``: :data:`DEFAULT_ARCH`, initial weights)."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    arch = saved.meta.arch.model_dump() if saved is not None else DEFAULT_ARCH
    kwargs = {**(saved.meta.ppo.kwargs() if saved is not None else PPO_KWARGS), **ppo}
    model = MaskablePPO(
        GuidedPPOPolicy,
        DummyVecEnv([lambda: Monitor(env)]),
        n_steps=n_steps,
        policy_kwargs={"features_extractor_kwargs": arch["extractor"], "net_arch": list(arch["head"])},
        seed=seed,
        device="cpu",
        **kwargs,
    )
    if saved is not None:
        transfer_weights(saved.policy_state, model.policy)
    return model


def improve_env(problem: PlacementProblem, max_steps: int, start: str = "heft") -> MoveFeatureObservation:
    """The wrapped improvement env of ``problem`` the policy trains on."""
    return MoveFeatureObservation(
        DevicePlacementImproveEnv(problem=problem, start=start, moves=ENV_MOVES, max_steps=max_steps)
    )


class GuidedPPO(PlacementMethod):
    """Guided improvement search ordered by a MaskablePPO policy's logits (see the module docstring).

    Args:
        policy: A shipped policy (``"all"``, ``"no-bert"``..., ``"untrained"``), a folder written by
            ``experiments.pretraining.guided_ppo``, or ``"auto"`` (``no-<model>`` on a suite model, else
            ``all``).
        fine_tune: Evaluations of MaskablePPO training on the target task before the search (0: none).
        stage: ``"ppo"`` (the shipped policies' final weights) or ``"imitation"`` (the ablation: their
            weights before the PPO stage, ``<name>-imitation``).
        budget: Evaluations when :meth:`place` gets ``budget=None``.
        batch_size, kick, tabu, depth, walk: The search's options, as ``guided_improvement``'s.
    """

    name = METHOD
    track = "white-box"  # reads the cost model (move features, HEFT start)

    def __init__(
        self,
        policy: str = "auto",
        fine_tune: int = 0,
        stage: str = "ppo",
        budget: int = 500,
        batch_size: int = 4,
        kick: int = 2,
        tabu: str = "global",
        depth: int = 96,
        walk: float = 0.02,
    ) -> None:
        if tabu not in TABUS:
            raise UnknownNameError("tabu rule", tabu, TABUS)
        if stage not in STAGES:
            raise UnknownNameError("guided_ppo stage", stage, STAGES)
        if isinstance(fine_tune, bool) or not isinstance(fine_tune, int) or fine_tune < 0:
            raise PlacementGymError(f"fine_tune={fine_tune!r} must be a number of evaluations >= 0")
        if batch_size < 1 or depth < 0 or walk < 0 or kick < 0:
            raise PlacementGymError(
                f"batch_size={batch_size} must be >= 1 and depth={depth}, walk={walk}, kick={kick} >= 0"
            )
        self.policy, self.fine_tune, self.stage, self.budget = policy, fine_tune, stage, budget
        self.batch_size, self.kick, self.tabu, self.depth, self.walk = batch_size, kick, tabu, depth, walk

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        problem = tracker.problem
        if tracker.budget is None:
            tracker.budget = self.budget
        if self.fine_tune and self.fine_tune + 2 > tracker.budget:
            raise PlacementGymError(
                f"budget={tracker.budget} must exceed fine_tune={self.fine_tune} by 2 evaluations at least"
            )
        path = resolve_policy(self.policy, problem.benchmark.name, self.stage)
        saved = read_transfer_policy(path, method=METHOD)  # checked: fields, bounds, finite weights
        state = saved.policy_state
        with deterministic_torch(seed):  # one thread from building the model on (agents.determinism)
            if self.fine_tune:
                steps = min(problem.num_groups, 32)
                model = ppo_model(improve_env(problem, steps), saved, min(self.fine_tune, 128), seed)
                model.learn(10 * self.fine_tune, callback=StopAtEvaluations(tracker, self.fine_tune))
                state = model.policy.state_dict()
            tuned = tracker.used
            arch = saved.meta.arch
            ranker = PolicyRanker.from_state(
                problem, state, arch.extractor.hidden, arch.extractor.layers, list(arch.head)
            )
            counts = guided_search(
                tracker,
                ranker,
                np.random.default_rng(seed),
                self.batch_size,
                self.kick,
                visitor=ranker.visit,
                local_tabu=self.tabu == "local",
                depth=self.depth or None,
                walk=self.walk,
            )
        training = saved.meta.training.model_dump(exclude_none=True, exclude={"arch", "ppo"})
        return {"policy": path.name, "pretraining": training, "fine_tune_evaluations": tuned, **counts}
