"""``pretrained_ppo``: a MaskablePPO policy pretrained on many simulated tasks, zero-shot or fine-tuned.

The policy is the device-free pair scorer of :mod:`agents.sb3.transfer_policy`, pretrained by
``experiments/pretraining/pretrained_ppo.py`` on the improvement MDP
(:class:`~placement_gym.envs.DevicePlacementImproveEnv`) over zoo models, synthetic DAGs and perturbed
platforms. Its weights fit any graph and any device count, so it places a task it never saw: the method
builds the improvement env of the target problem, loads the weights into a policy built for its spaces,
optionally fine-tunes it with MaskablePPO for ``fine_tune`` evaluations, then spends the rest of the
budget on one of two uses of the policy, both starting from the better of HEFT and the best single
device:

* ``search="rank"`` (default): the policy's logits rank the moves of the current placement; the moves
  are evaluated in that order (a placement already evaluated is skipped) and the first faster one is
  taken, until the budget is spent or no move improves (a descent steered by the policy, as
  ``guided_improvement`` is steered by its supervised scorer);
* ``search="sample"``: episodes of the MDP with moves sampled from the policy, each restarting from the
  best placement so far. Every evaluation on the target task
counts against the budget, fine-tuning included; pretraining does not, and is reported in the result's
``extra["pretraining"]`` (its env steps, evaluations, wall and CPU seconds, cores, command).

Shipped policies (``agents/sb3/pretrained/<name>/``: ``weights.pt`` and ``meta.json``, written and read,
like any policy folder given as ``policy=PATH``, only through :mod:`agents.sb3.policy_file`): ``all``
(trained on the three zoo training models and synthetic graphs), ``no-<model>`` (the same without that
model: leave-one-model-out for the suite tasks of ``<model>``) where shipped, and ``untrained`` (the
initial weights, the control that shows what the rollouts find without pretraining). ``policy="auto"``
picks ``no-<model>`` for a zoo training model when shipped, else ``all``.

Example::

    result = make_method("pretrained_ppo").place(PlacementProblem.make("vit_b16", "cpu-igpu"), budget=100)
    result.extra["pretraining"]["wall_s"]
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from sb3_contrib import MaskablePPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from agents.base import BudgetTracker, PlacementMethod
from agents.determinism import deterministic_torch
from agents.sb3.policy_file import policy_folder, read_transfer_policy, shipped_policy_names
from agents.sb3.transfer_policy import PairScoringPolicy, transfer_weights
from placement_gym import BENCHMARK_MODELS
from placement_gym.envs import DevicePlacementImproveEnv
from placement_gym.envs.observation import one_hot
from placement_gym.errors import PlacementGymError, UnknownNameError

#: Folder of the shipped policies.
PRETRAINED_DIR = Path(__file__).with_name("pretrained")
#: Architecture of the pretrained policies.
DEFAULT_ARCH: dict[str, Any] = {"extractor": {"hidden": 32, "layers": 3}, "head": [64]}
#: MaskablePPO hyperparameters of pretraining and fine-tuning (``n_steps`` is set per use).
PPO_KWARGS: dict[str, Any] = {
    "learning_rate": 3e-4,
    "batch_size": 64,
    "n_epochs": 4,
    "gamma": 0.95,
    "gae_lambda": 0.9,
    "ent_coef": 0.01,
}
SEARCHES = ("rank", "sample")
_COST_KEYS = ("env_steps", "evaluations", "wall_s", "cpu_s", "cores", "load_1min", "models", "command")


def shipped_policies() -> list[str]:
    """Names of the policies shipped in :data:`PRETRAINED_DIR`."""
    return shipped_policy_names(PRETRAINED_DIR)


def resolve_policy(policy: str, model: str) -> Path:
    """The folder of ``policy`` (a shipped name, ``"auto"``, or a path) for a task of ``model``.

    Raises:
        UnknownNameError: For a name that is neither shipped nor a folder.
    """
    if policy == "auto":
        own = PRETRAINED_DIR / f"no-{model}"
        policy = own.name if model in BENCHMARK_MODELS and own.is_dir() else "all"
    return policy_folder(policy, PRETRAINED_DIR, "pretrained policy (a shipped name or a folder)")


class StopAtEvaluations(BaseCallback):
    """Stops fine-tuning once ``limit`` evaluations are spent."""

    def __init__(self, tracker: BudgetTracker, limit: int) -> None:
        super().__init__()
        self.tracker, self.limit = tracker, limit

    def _on_step(self) -> bool:
        return self.tracker.used < self.limit


class PretrainedPPO(PlacementMethod):
    """Apply a pretrained pair-scoring policy to the target task, zero-shot or fine-tuned.

    Args:
        policy: A shipped policy name (``"all"``, ``"no-bert"``..., ``"untrained"``), a folder written by
            :func:`~agents.sb3.policy_file.write_transfer_policy`, or ``"auto"`` (``no-<model>`` for a zoo
            training model when shipped, else ``all``).
        fine_tune: Evaluations of MaskablePPO training on the target before the rollouts (0: zero-shot).
        episode: Moves per rollout episode (default: the number of groups, at most 64).
        moves: Move kinds of the improvement env (comma-separated, see ``DevicePlacementImproveEnv``);
            default: the ones the policy was pretrained with.
        search: ``"rank"`` (evaluate moves in the policy's order, take the first improvement) or
            ``"sample"`` (roll the policy out in the MDP).
        deterministic: With ``search="sample"``, take the policy's most likely move instead of sampling.
        budget: Evaluations when :meth:`place` gets ``budget=None``.
    """

    name = "pretrained_ppo"
    track = "white-box"  # reads the cost model

    def __init__(
        self,
        policy: str = "auto",
        fine_tune: int = 0,
        episode: int | None = None,
        moves: str | None = None,
        search: str = "rank",
        deterministic: bool = False,
        budget: int = 100,
    ) -> None:
        if search not in SEARCHES:
            raise UnknownNameError("pretrained_ppo search", str(search), SEARCHES)
        if isinstance(fine_tune, bool) or not isinstance(fine_tune, int) or fine_tune < 0:
            raise PlacementGymError(f"fine_tune={fine_tune!r} must be a number of evaluations >= 0")
        if episode is not None and (not isinstance(episode, int) or episode < 1):
            raise PlacementGymError(f"episode={episode!r} must be a number of moves >= 1")
        self.policy, self.fine_tune, self.episode, self.search = policy, fine_tune, episode, search
        self.deterministic, self.budget, self.moves = bool(deterministic), budget, moves

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        problem = tracker.problem
        if tracker.budget is None:
            tracker.budget = self.budget
        if tracker.budget < 2 or self.fine_tune >= tracker.budget:
            raise PlacementGymError(
                f"budget={tracker.budget} must exceed fine_tune={self.fine_tune} and leave 2 evaluations"
            )
        path = resolve_policy(self.policy, problem.benchmark.name)
        saved = read_transfer_policy(path)  # checked: fields, bounds, finite weights (policy_file.py)
        meta = saved.meta
        steps = self.episode or min(problem.num_groups, 64)
        moves = self.moves or meta.training.moves or "single"
        improve = DevicePlacementImproveEnv(problem=problem, start="heft", moves=moves, max_steps=steps)
        with deterministic_torch(seed):  # one thread from building the model on (agents.determinism)
            model = MaskablePPO(
                PairScoringPolicy,
                DummyVecEnv([lambda: Monitor(improve)]),
                n_steps=max(min(self.fine_tune, 256), 1),
                policy_kwargs={
                    "features_extractor_kwargs": meta.arch.extractor.model_dump(),
                    "net_arch": list(meta.arch.head),
                },
                seed=seed,
                device="cpu",
                **{**meta.ppo.kwargs(), "batch_size": min(meta.ppo.batch_size, max(self.fine_tune, 1))},
            )
            transfer_weights(saved.policy_state, model.policy)
            if self.fine_tune:
                model.learn(total_timesteps=10 * self.fine_tune, callback=StopAtEvaluations(tracker, self.fine_tune))
            tuned = tracker.used
            if self.search == "rank":
                self._ranked_descent(improve, model, tracker)
            else:
                self._rollouts(improve, model, tracker, seed)
        training = meta.training.model_dump(exclude_unset=True)
        return {
            "policy": path.name,
            "pretraining": {k: training[k] for k in (*_COST_KEYS, "load_1min_mean") if k in training},
            "fine_tune_evaluations": tuned,
        }

    def _rollouts(
        self, env: DevicePlacementImproveEnv, model: MaskablePPO, tracker: BudgetTracker, seed: int
    ) -> None:
        """Roll the policy out until the budget is spent; each episode starts from the best placement so
        far, the first from HEFT, the second from the best single device when that is faster."""
        problem, episode, start = tracker.problem, 0, None  # None: the env's start, HEFT
        while tracker.remaining and tracker.remaining > 1:
            options = None if start is None else {"placement": start}
            obs, info = env.reset(seed=seed + episode, options=options)
            episode += 1
            if episode == 1 and problem.has_baseline and problem.baseline.latency < info["latency"]:
                start = problem.baseline_placement
                continue
            truncated = False
            while not truncated and tracker.remaining:
                masks = env.action_masks()
                action, _ = model.predict(obs, deterministic=self.deterministic, action_masks=masks)
                obs, _, _, truncated, _ = env.step(int(action))
            start = tracker.best_placement

    def _start(self, env: DevicePlacementImproveEnv, tracker: BudgetTracker) -> tuple[dict, float]:
        """Reset from HEFT, or from the best single device when it is faster: observation and latency."""
        problem = tracker.problem
        obs, info = env.reset(seed=0)
        if problem.has_baseline and problem.baseline.latency < info["latency"] and tracker.remaining:
            obs, info = env.reset(seed=0, options={"placement": problem.baseline_placement})
        return obs, float(info["latency"])

    def _ranked_descent(
        self, env: DevicePlacementImproveEnv, model: MaskablePPO, tracker: BudgetTracker
    ) -> None:
        """First-improvement descent over the moves in the order of the policy's logits."""
        obs, latency = self._start(env, tracker)
        start = latency
        current, d = env.placement.copy(), env.num_devices
        sets = obs.get("move_members")  # (M, S) groups of each set, -1 padding; None: single moves
        tried = {current.tobytes()}
        steps = 0
        while tracker.remaining:
            env.placement = current  # for its masks of this placement
            masks = env.action_masks()
            with torch.no_grad():
                tensor, _ = model.policy.obs_to_tensor(obs)
                features = model.policy.extract_features(tensor, model.policy.features_extractor)
                logits = model.policy.mlp_extractor.forward_actor(features)[0].numpy()
            order = np.flatnonzero(masks)[np.argsort(-logits[masks], kind="stable")]
            improved = False
            for action in order:
                s, device = divmod(int(action), d)
                new = current.copy()
                new[s if sets is None else sets[s][sets[s] >= 0]] = device
                if new.tobytes() in tried:
                    continue
                tried.add(new.tobytes())
                if not tracker.remaining:
                    return
                found, _ = tracker.evaluate(new)
                if found < latency:
                    current, latency, improved = new, found, True
                    break
            if not improved:
                return  # no move of any set improves: a local optimum of the move kinds
            steps += 1
            obs = {
                **obs,
                "placement": one_hot(current, env.max_nodes, d),
                "episode": np.clip(
                    np.array([math.log(start / latency), math.log(start / latency), steps / env.max_steps]),
                    -10.0,
                    10.0,
                ).astype(np.float32),
            }
