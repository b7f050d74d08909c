"""MaskablePPO on the improvement MDP: the GNN policy chooses moves, episodes restart from the best placement.

:class:`RestartFromBest` wraps a :class:`~placement_gym.envs.DevicePlacementImproveEnv`: the first episode
starts from the better of HEFT and the best single device, every later one from the best placement seen
so far, and, with ``skip_tried=True``, ``action_masks()`` also hides the moves already tried from the
current placement (their result is known). So short episodes of a learned move order explore around the
incumbent, as a local search does, while PPO learns from every move's reward which moves pay.
:class:`MaskablePPOImprove` (``maskable_ppo_improve``) trains it for the evaluation budget and returns
the best placement of the run (the tracker's).

Example::

    from agents import make_method
    result = make_method("maskable_ppo_improve").place(problem, budget=500, seed=0)
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from sb3_contrib import MaskablePPO

from agents.base import BudgetTracker
from agents.determinism import deterministic_torch
from agents.sb3.methods import BudgetCallback, _GNNMethod
from agents.sb3.policy import MaskableGNNActorCriticPolicy
from agents.sb3.recipe import recipe
from placement_gym.errors import PlacementGymError
from placement_gym.problem import problem_of

_RECIPE = recipe("improve", "maskable_ppo")


class RestartFromBest(gym.Wrapper):
    """Restart every episode of an improvement env from the best placement seen; mask tried moves.

    Args:
        env: A ``DevicePlacementImproveEnv``.
        skip_tried: Mask the moves already tried from the current placement (while another move is
            allowed).
        stop_on_worse: End the episode (truncate) after a move that made the placement slower, so the
            next one restarts from the best placement instead of wandering from a worse one.
    """

    def __init__(self, env: gym.Env, skip_tried: bool = True, stop_on_worse: bool = True) -> None:
        super().__init__(env)
        self.skip_tried, self.stop_on_worse = skip_tried, stop_on_worse
        self.best_latency = float("inf")
        self.best_placement: np.ndarray | None = None
        self._tried: dict[bytes, set[int]] = {}
        self._placement: np.ndarray | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if options or self.best_placement is None:
            obs, info = self.env.reset(seed=seed, options=options)
            if not options:  # first episode: HEFT's placement, unless the best single device is faster
                problem = problem_of(self.env)
                if problem.has_baseline and problem.baseline.latency < info["start_latency"]:
                    self._keep(info)
                    obs, info = self.env.reset(options={"start": "best_single"})
        else:
            obs, info = self.env.reset(seed=seed, options={"placement": self.best_placement})
        self._keep(info)
        return obs, info

    def step(self, action):
        key = self._placement.tobytes()
        self._tried.setdefault(key, set()).add(int(action))
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._keep(info)
        if self.stop_on_worse and reward < 0:
            truncated = True
        return obs, reward, terminated, truncated, info

    def _keep(self, info: dict) -> None:
        self._placement = np.asarray(info["placement"], dtype=np.int64)
        if info["best_latency"] < self.best_latency:
            self.best_latency = float(info["best_latency"])
            self.best_placement = np.array(info["best_placement"], dtype=np.int64)

    def action_masks(self) -> np.ndarray:
        """The env's masks, without the moves tried from the current placement (if another is left)."""
        mask = self.env.unwrapped.action_masks()
        tried = self._tried.get(self._placement.tobytes()) if self.skip_tried else None
        if tried:
            fresh = mask.copy()
            fresh[list(tried)] = False
            if fresh.any():
                return fresh
        return mask


class MaskablePPOImprove(_GNNMethod):
    """MaskablePPO with the GNN pair-scoring policy on the improvement MDP.

    Args:
        episode_steps: Moves per episode before restarting from the best placement.
        skip_tried: Mask moves already tried from the current placement.
        stop_on_worse: Restart from the best placement after a move that made the placement slower.
        moves: Move kinds of the env, separated by ``,`` or ``+`` (``"single"``; also ``"class"``, ``"segment"``,
            ``"branch"``: a set's logit is the mean of its members' pair logits plus a per-set bias).
        **kwargs: :class:`~agents.sb3.methods._GNNMethod` arguments and MaskablePPO hyperparameters
            (default: :func:`agents.sb3.recipe.recipe` ``("improve", "maskable_ppo")``).
    """

    name = "maskable_ppo_improve"
    track = "white-box"  # reads the cost model
    algo_class = MaskablePPO
    policy_class = MaskableGNNActorCriticPolicy
    defaults: ClassVar[dict[str, Any]] = _RECIPE.hyperparams

    def __init__(
        self,
        episode_steps: int = 16,
        skip_tried: bool = True,
        stop_on_worse: bool = True,
        moves: str = "single",
        pair_bias_scale: float = _RECIPE.policy_kwargs["pair_bias_scale"],
        **kwargs: Any,
    ) -> None:
        if episode_steps < 1:
            raise PlacementGymError(f"episode_steps={episode_steps} must be >= 1")
        # "+" as well as ",": method specs on the command line split their arguments at commas
        self.episode_steps, self.skip_tried = int(episode_steps), bool(skip_tried)
        self.moves = moves.replace("+", ",")
        self.stop_on_worse = bool(stop_on_worse)
        super().__init__(pair_bias_scale=pair_bias_scale, observation="device", **kwargs)

    def policy_env(self, env: gym.Env) -> gym.Env:
        from placement_gym.envs import DevicePlacementImproveEnv

        if isinstance(env, RestartFromBest):
            return env
        inner = env.unwrapped
        improve = DevicePlacementImproveEnv(
            problem=problem_of(env),
            moves=self.moves,
            max_steps=self.episode_steps,
            max_nodes=inner.max_nodes,
            max_edges=inner.max_edges,
        )
        return RestartFromBest(improve, self.skip_tried, self.stop_on_worse)

    def _saved_kwargs(self) -> dict[str, Any]:
        kwargs = super()._saved_kwargs()
        kwargs.pop("observation", None)
        return {
            **kwargs,
            "episode_steps": self.episode_steps,
            "skip_tried": self.skip_tried,
            "stop_on_worse": self.stop_on_worse,
        }

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        if tracker.budget is None:
            tracker.budget = self.budget
        if self.n_envs != 1:
            raise PlacementGymError("maskable_ppo_improve runs one env (n_envs=1)")
        env = self.policy_env(env)
        if tracker.budget < 4:
            raise PlacementGymError(f"budget={tracker.budget} is too small: the starts alone take up to 3")
        with deterministic_torch(seed, self.threads):  # the initial weights depend on the thread count
            vec_env = self.make_vec_env(env)
            model = self.make_model(vec_env, seed)
            start = time.perf_counter()
            # a step costs one evaluation, two when its episode ends (the restart is evaluated)
            model.learn(total_timesteps=tracker.budget, callback=BudgetCallback(tracker, tracker.budget, 2))
        train_time = time.perf_counter() - start
        self.model = model
        return {
            "model": model,
            "train_steps": int(model.num_timesteps),
            "train_time": train_time,
            "steps_per_second": model.num_timesteps / train_time if train_time > 0 else float("nan"),
        }
