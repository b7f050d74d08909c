"""Stable-Baselines3 learners as placement methods: PPO, A2C and MaskablePPO with GNN policies, and PPO
with SB3's MLP ``MultiInputPolicy`` as the ablation baseline.

A method trains its model on the env it is given, for the evaluation budget: every placement evaluated
during training counts (in-process through the problem's counting, from the ``info`` of worker processes
with ``n_envs > 1``), and a callback stops training before the budget is spent; one evaluation is kept
for the trained policy's deterministic placement at the end. The trained model is kept (``method.model``, ``result.extra["model"]``) and can be
saved, loaded and applied to other graphs padded to the same spaces (:meth:`SB3Method.predict_placement`).

Example::

    env = DevicePlacementEnv("tiny_bert", "cpu-dgpu", "simulated")
    method = PPOGNN(gnn="sage", hidden=64, layers=3)
    result = method.place(env, budget=2000, seed=0)
    method.save("ppo_gnn")          # a folder: weights.pt (tensors only) + meta.json

Saved policies are safe to load (no pickle); SB3's own zips are loaded only with ``trusted=True``.
"""

from __future__ import annotations

import functools
import json
import pickle
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from sb3_contrib import MaskablePPO
from stable_baselines3 import A2C, PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

from agents.base import BudgetTracker, PlacementMethod
from agents.determinism import deterministic_torch
from agents.sb3.extractors import extractor_class
from agents.sb3.policy import GNNActorCriticPolicy, MaskableGNNActorCriticPolicy
from agents.sb3.policy_file import POLICY_FORMAT as _POLICY_FORMAT
from agents.sb3.policy_file import read_policy
from agents.sb3.recipe import budget_learning_rate, recipe
from agents.sb3.worker_envs import pinned_monitored_env, unpickled_env
from placement_gym.envs.device_placement import OBSERVATIONS, DevicePlacementEnv
from placement_gym.errors import PlacementGymError, UnknownNameError, UntrustedFileError
from placement_gym.limits import BYTES_PER_EVALUATION, require_memory
from placement_gym.measured.workers import assign_cores, cores_per_device
from placement_gym.problem import problem_of
from placement_gym.validation import Range

DEFAULT_BUDGET = 2000  # evaluations when place() gets budget=None
_ONESHOT = recipe("oneshot", "ppo")


class BudgetCallback(BaseCallback):
    """Stops training as soon as one more vectorised step could take the trackers past ``limit`` evaluations.

    Evaluations made in this process are counted by the problems the trackers watch; with ``remote=True``
    (the envs live in ``SubprocVecEnv`` workers) the callback records each step's evaluations from the infos,
    with the env copy's index, the vector step (counted from 1) and the seconds the copy's backend spent
    (``info["evaluation_s"]`` of a measured env) for the trackers' listeners
    (:class:`~placement_gym.budget.Run`).
    One tracker watches one task; several (:func:`agents.sb3.multitask.train_multitask`) share ``limit``.

    Args:
        tracker: The method's tracker, or one tracker per task.
        limit: Evaluations training may spend, summed over the trackers (``None``: no limit).
        n_envs: Envs stepped together (evaluations one step can cost).
        remote: Record evaluations from the infos (they happened in other processes; one tracker only).
    """

    def __init__(
        self,
        tracker: BudgetTracker | Sequence[BudgetTracker],
        limit: int | None,
        n_envs: int,
        remote: bool = False,
    ) -> None:
        super().__init__()
        self.trackers = [tracker] if isinstance(tracker, BudgetTracker) else list(tracker)
        if remote and len(self.trackers) != 1:
            raise PlacementGymError(f"remote=True records into one tracker, got {len(self.trackers)}")
        self.limit, self.n_envs, self.remote = limit, n_envs, remote

    def _on_step(self) -> bool:
        if self.remote:
            for worker, info in enumerate(self.locals["infos"]):
                if "latency" in info:
                    self.trackers[0].record(
                        info["placement"],
                        info["latency"],
                        info["feasible"],
                        worker=worker,
                        vector_step=self.n_calls,
                        evaluation_s=info.get("evaluation_s"),
                    )
        if any(t.stalled for t in self.trackers):  # an env wrapper caught the stall: training ends too
            return False
        return self.limit is None or sum(t.used for t in self.trackers) + self.n_envs <= self.limit


class SB3Method(PlacementMethod):
    """Base class of the SB3 methods: training for the budget, final deterministic placement, save/load.

    Args:
        budget: Evaluations when :meth:`place` gets ``budget=None``.
        n_envs: Envs stepped together. 1: the env itself (``DummyVecEnv``). More: copies of the env in a
            ``SubprocVecEnv``, one process each, stepped in parallel (for measured backends; the env must be
            built from names so that it pickles). Copies of a measured env are measuring workers, each
            pinned to its own cores (:attr:`worker_cores`).
        device: Torch device.
        verbose: SB3 verbosity.
        policy_kwargs: Extra policy arguments (merged over the method's own).
        fine_tune: When the method already has a model (trained, or loaded with :meth:`load`),
            :meth:`place` continues training it instead of building a fresh one (same spaces needed).
        threads: Torch threads of the run, from building the model to its final placement (restored
            afterwards; :mod:`agents.determinism`); ``None``: torch's setting (the result then depends on it).
        **algo_kwargs: Learning hyperparameters of the SB3 algorithm, over :attr:`defaults`.

    Attributes:
        worker_cores: Where the ``n_envs`` copies of a measured env run: one core set per copy, each copy's
            process pinned to it before the env is built (its ``local`` platform is then the one of those
            cores). None (the default): disjoint sets of this process's cores, a core per 1-thread CPU
            device each (:func:`~placement_gym.measured.workers.cores_per_device`), in order, or a one-line
            error if there are too few (:func:`~placement_gym.measured.workers.assign_cores`). Not a
            hyperparameter: never saved.
    """

    algo_class: ClassVar[type[BaseAlgorithm]] = PPO
    #: Hyperparameters for one-shot placement: an episode is one step, so gamma and GAE do not matter
    #: there; gamma = 1 suits sequential mode's single final reward.
    defaults: ClassVar[dict[str, Any]] = {}
    #: Whether the default learning rate falls with the run's budget (one-shot PPO with the GNN policy).
    budget_scaled_learning_rate: ClassVar[bool] = False
    #: Bounds of the arguments (checked by :mod:`agents.specs`); widths and step counts say what memory
    #: they need at least (a float32 weight matrix, six float32 rollout values per step, a process per env).
    argument_ranges: ClassVar[dict[str, Range]] = {
        **PlacementMethod.argument_ranges,
        "budget": Range(2, memory=lambda n: n * BYTES_PER_EVALUATION),
        "n_envs": Range(1, memory=lambda n: n * 256 * 2**20),
        "verbose": Range(0, 2),
        "hidden": Range(1, memory=lambda h: 4.0 * h * h),
        "layers": Range(1, 64),  # message-passing layers: a loop count, and 64 is far past oversmoothing
        "head": Range(1, memory=lambda h: 4.0 * h * h),
        "net_arch": Range(1, memory=lambda h: 4.0 * h * h),
        "learning_rate": Range(0, low_open=True),
        "n_steps": Range(1, memory=lambda n: 24.0 * n),
        "batch_size": Range(2, memory=lambda n: 24.0 * n),
        "n_epochs": Range(1),
        "gamma": Range(0, 1),
        "gae_lambda": Range(0, 1),
        "clip_range": Range(0, low_open=True),
        "ent_coef": Range(0),
        "vf_coef": Range(0),
        "max_grad_norm": Range(0, low_open=True),
        "stats_window_size": Range(1, memory=lambda n: 64.0 * n),
        "positional": Range(0, 1024),  # sinusoidal features per group (0: none)
        "pair_bias_scale": Range(0),
    }

    @classmethod
    def forwarded_parameters(cls) -> dict[str, Any]:
        """The SB3 algorithm's own keyword parameters, which ``**algo_kwargs`` reach (for :mod:`agents.specs`),
        without those the method sets itself."""
        import inspect

        own = {"policy", "env", "seed", "device", "verbose", "policy_kwargs", "_init_setup_model"}
        optional = {"target_kl": float | None, "clip_range_vf": float | None, "tensorboard_log": str | None}
        hints = {}
        for p in list(inspect.signature(cls.algo_class.__init__).parameters.values())[1:]:
            if p.name in own or p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
                continue
            if p.name in optional or type(p.default) in (bool, int, float, str):
                hints[p.name] = optional.get(p.name, type(p.default))
        return hints  # classes and schedules (rollout_buffer_class, ...) cannot be given as arguments

    def __init__(
        self,
        budget: int = DEFAULT_BUDGET,
        n_envs: int = 1,
        device: str = "cpu",
        verbose: int = 0,
        policy_kwargs: dict[str, Any] | None = None,
        fine_tune: bool = False,
        threads: int | None = 1,
        **algo_kwargs: Any,
    ) -> None:
        if n_envs < 1:
            raise PlacementGymError(f"n_envs={n_envs} must be >= 1")
        self.budget, self.n_envs, self.device, self.verbose = budget, n_envs, device, verbose
        self.extra_policy_kwargs = dict(policy_kwargs or {})
        self.algo_kwargs = {**self.defaults, **algo_kwargs}
        self.learning_rate_given = "learning_rate" in algo_kwargs
        self.run_budget: int | None = None
        self.fine_tune = bool(fine_tune)
        self.threads = threads
        self.model: BaseAlgorithm | None = None
        self.worker_cores: list[tuple[int, ...]] | None = None

    # ------------------------------------------------------------------ what subclasses choose
    def policy(self) -> tuple[Any, dict[str, Any]]:
        """The policy (class or SB3 name) and its keyword arguments."""
        raise NotImplementedError

    # ------------------------------------------------------------------ training
    def make_vec_env(self, env: gym.Env) -> VecEnv:
        """``env`` itself (one env) or ``n_envs`` copies of it in worker processes."""
        if self.n_envs == 1:
            return DummyVecEnv([lambda: Monitor(env)])
        try:
            blob = pickle.dumps(env)
        except TypeError as exc:
            raise PlacementGymError(f"n_envs={self.n_envs} runs env copies in processes, but {exc}") from exc
        cores = self._measuring_cores(env)
        if cores is None:
            return SubprocVecEnv([functools.partial(unpickled_env, blob) for _ in range(self.n_envs)])
        return SubprocVecEnv([functools.partial(pinned_monitored_env, blob, c) for c in cores])

    def _measuring_cores(self, env: gym.Env) -> list[tuple[int, ...]] | None:
        """The core set of each env copy: :attr:`worker_cores`, else assigned for a measured env; None
        for an env that does not measure (its copies run wherever the OS puts them)."""
        problem = problem_of(env)
        if self.worker_cores is not None:
            cores = [tuple(int(c) for c in s) for s in self.worker_cores]
            if len(cores) != self.n_envs or not all(cores):
                raise PlacementGymError(
                    f"worker_cores gives {len(cores)} core set(s) for n_envs={self.n_envs} env copies; "
                    "give one non-empty set per copy"
                )
            return cores
        if problem.backend_name != "measured":
            return None
        return assign_cores(self.n_envs, cores_per_device(problem.platform))

    def make_model(self, env: gym.Env | VecEnv, seed: int) -> BaseAlgorithm:
        """A fresh SB3 model on ``env`` (a vector env, or an env made into one by :meth:`make_vec_env`)."""
        vec_env = env if isinstance(env, VecEnv) else self.make_vec_env(env)
        if self.fine_tune and self.model is not None:  # continue training the trained or loaded policy
            if (vec_env.observation_space, vec_env.action_space) != (
                self.model.observation_space,
                self.model.action_space,
            ):
                raise PlacementGymError(
                    "fine-tuning needs the spaces the policy was trained on; pad with the same "
                    f"max_nodes/max_edges and device count (policy: {self.model.action_space}, "
                    f"env: {vec_env.action_space})"
                )
            self.model.set_env(vec_env)
            return self.model
        self._require_rollout_memory(vec_env)
        policy, policy_kwargs = self.policy()
        return self.algo_class(
            policy,
            vec_env,
            policy_kwargs={**policy_kwargs, **self.extra_policy_kwargs},
            seed=seed,
            device=self.device,
            verbose=self.verbose,
            **self.run_hyperparams(),
        )

    def run_hyperparams(self) -> dict[str, Any]:
        """The algorithm's keyword arguments for the run in progress: :attr:`algo_kwargs`, with the
        learning rate of the run's budget (:func:`~agents.sb3.recipe.budget_learning_rate`) where the
        method scales it (:attr:`budget_scaled_learning_rate`), the env is one-shot and no
        ``learning_rate`` was given."""
        kwargs = dict(self.algo_kwargs)
        if self.budget_scaled_learning_rate and not self.learning_rate_given and self.run_budget is not None:
            kwargs["learning_rate"] = budget_learning_rate(self.run_budget, base=kwargs["learning_rate"])
        return kwargs

    def _require_rollout_memory(self, vec_env: VecEnv) -> None:
        """Refuse an ``n_steps`` whose rollout buffer (observations, actions and six float32 values per
        step and env) would not fit in memory, before SB3 allocates it."""
        import inspect

        params = inspect.signature(self.algo_class.__init__).parameters
        n_steps = self.algo_kwargs.get("n_steps", params["n_steps"].default if "n_steps" in params else 1)
        per_step = gym.spaces.flatdim(vec_env.observation_space) + gym.spaces.flatdim(vec_env.action_space) + 6
        require_memory(
            4.0 * n_steps * vec_env.num_envs * per_step,
            f"n_steps={n_steps} with {vec_env.num_envs} env(s) of {per_step} values per step (the rollout buffer)",
        )

    def policy_env(self, env: gym.Env) -> gym.Env:
        """The env the policy acts on for ``env`` (subclasses may view its problem differently)."""
        return env

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        env = self.policy_env(env)
        if tracker.budget is None:
            tracker.budget = self.budget
        if tracker.budget < self.n_envs + 1:
            raise PlacementGymError(
                f"budget={tracker.budget} is too small: training needs n_envs={self.n_envs} evaluations "
                "per step plus one for the final placement"
            )
        # the budget-scaled learning rate was measured on one-shot placement only (docs/research-notes.md)
        self.run_budget = tracker.budget if getattr(env.unwrapped, "mode", None) == "oneshot" else None
        steps_per_eval = 1 if env.unwrapped.mode == "oneshot" else env.unwrapped.num_groups
        # One thread count from building the model to the final episode: the initial weights depend on it
        # (agents.determinism). Small networks, batches of 16: more threads cost more than they save.
        with deterministic_torch(seed, self.threads):
            vec_env = self.make_vec_env(env)
            model = self.make_model(vec_env, seed)
            self.model = model  # the model in training, for listeners that checkpoint it
            start = time.perf_counter()
            try:
                model.learn(
                    total_timesteps=tracker.budget * steps_per_eval,
                    callback=BudgetCallback(
                        tracker, tracker.budget - 1, self.n_envs, remote=isinstance(vec_env, SubprocVecEnv)
                    ),
                )
            finally:
                if isinstance(vec_env, SubprocVecEnv):
                    vec_env.close()
            train_time = time.perf_counter() - start
            info = self._deterministic_episode(env, model, seed)  # counted by the problem
        rewards = [ep["r"] for ep in model.ep_info_buffer]
        return {
            "model": model,
            "final_mean_reward": float(np.mean(rewards)) if rewards else float("nan"),
            "deterministic_latency": float(info["latency"]),
            "deterministic_placement": np.asarray(info["placement"], dtype=np.int64),
            "train_steps": int(model.num_timesteps),
            "train_time": train_time,
            "steps_per_second": model.num_timesteps / train_time if train_time > 0 else float("nan"),
        }

    # ------------------------------------------------------------------ using a trained model
    def _deterministic_episode(self, env: gym.Env, model: BaseAlgorithm, seed: int) -> dict[str, Any]:
        """Run one episode of the deterministic policy on ``env``; the final step's info."""
        obs, _ = env.reset(seed=seed)
        while True:
            kwargs = {"action_masks": env.unwrapped.action_masks()} if isinstance(model, MaskablePPO) else {}
            action, _ = model.predict(obs, deterministic=True, **kwargs)
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                return info

    def predict_placement(self, env: gym.Env, seed: int = 0) -> np.ndarray:
        """The trained policy's deterministic ``(G,)`` placement of ``env``'s graph (one evaluation).

        ``env`` may hold a different graph from the one trained on, as long as its spaces are the same
        (pad with the same ``max_nodes``/``max_edges`` on the same platform).

        Raises:
            PlacementGymError: If no model was trained or loaded, or the spaces differ.
        """
        model = self._require_model()
        env = self.policy_env(env)
        if env.observation_space != model.observation_space or env.action_space != model.action_space:
            raise PlacementGymError(
                "env spaces differ from the model's; pad both graphs with the same max_nodes/max_edges "
                f"on the same platform (model: {model.action_space}, env: {env.action_space})"
            )
        return np.asarray(self._deterministic_episode(env, model, seed)["placement"], dtype=np.int64)

    # ------------------------------------------------------------------ saving and loading
    def save(self, path: str | Path) -> Path:
        """Save the trained policy in the safe format: a folder with ``weights.pt`` (the policy's
        ``state_dict`` and the observation bounds, tensors only, read back with
        ``torch.load(weights_only=True)``) and ``meta.json`` (method, constructor arguments, spaces,
        library versions). Nothing in it is unpickled on load, so it cannot run code.

        Returns:
            The folder.

        Raises:
            PlacementGymError: If no model was trained or loaded, ``path`` ends in ``.zip`` (SB3's
                pickle format is not written), or the method's arguments are not JSON data.
        """
        model = self._require_model()
        path = Path(path)
        if path.suffix == ".zip":
            raise PlacementGymError(
                f"{path}: save() writes a folder (weights + JSON), not an SB3 zip; give a path without .zip"
            )
        obs = model.observation_space
        if not isinstance(obs, gym.spaces.Dict) or not all(
            isinstance(b, gym.spaces.Box) for b in obs.values()
        ):
            raise PlacementGymError(
                f"{self.name}: only Dict-of-Box observation spaces can be saved, got {obs}"
            )
        meta = {
            "format": _POLICY_FORMAT,
            "method": self.name,
            "algorithm": type(model).__name__,
            "kwargs": self._saved_kwargs(),
            "observation_space": {k: {"shape": list(b.shape), "dtype": str(b.dtype)} for k, b in obs.items()},
            # Discrete(n) (sequential, improvement moves) is stored as the number n, MultiDiscrete as its list
            "action_space": {"nvec": _nvec(model.action_space)},
            "versions": _versions(),
        }
        try:
            text = json.dumps(meta, indent=1, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise PlacementGymError(
                f"{self.name}: its arguments cannot be saved as JSON ({exc}); pass plain numbers, strings and "
                "lists as policy_kwargs and hyperparameters"
            ) from exc
        bounds = {
            f"{k}.{end}": torch.as_tensor(getattr(b, end)) for k, b in obs.items() for end in ("low", "high")
        }
        path.mkdir(parents=True, exist_ok=True)
        torch.save({"policy": model.policy.state_dict(), "bounds": bounds}, path / "weights.pt")
        (path / "meta.json").write_text(text)
        return path

    def load(self, path: str | Path, env: gym.Env | None = None, *, trusted: bool = False) -> BaseAlgorithm:
        """Load a policy saved by :meth:`save` (optionally attached to ``env``) and keep it.

        The method's architecture (GNN kind, widths...) is taken from the saved ``meta.json``, whatever
        this instance was built with. An SB3 ``.zip`` (written by SB3's own ``save``) unpickles Python
        objects while loading, so a crafted file runs code: it is loaded only with ``trusted=True``.

        Raises:
            UntrustedFileError: For an SB3 zip without ``trusted=True``.
            PlacementGymError: For a folder that is not a saved policy of this method, damaged weights,
                or an ``env`` whose spaces differ from the saved ones.
        """
        path = Path(path)
        if (path / "meta.json").is_file():
            self.model = self._load_safe(path, env)
        elif not trusted:
            raise UntrustedFileError(
                f"{path} is not a policy folder written by save(); an SB3 zip unpickles Python objects when "
                "loaded and can run any code. Load it only if you trust where it came from: "
                "load(path, trusted=True)"
            )
        else:
            self.model = self.algo_class.load(path, env=env, device=self.device)
        return self.model

    def _saved_kwargs(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this method's model (architecture and hyperparameters)."""
        kwargs: dict[str, Any] = {"policy_kwargs": self.extra_policy_kwargs, **self.algo_kwargs}
        kwargs.pop("tensorboard_log", None)  # where this run logged, not part of the policy
        for name in ("gnn", "hidden", "layers", "head", "net_arch", "observation", "positional", "pair_bias_scale"):
            if hasattr(self, name):
                kwargs[name] = getattr(self, name)
        return kwargs

    def _load_safe(self, path: Path, env: gym.Env | None) -> BaseAlgorithm:
        saved = read_policy(path, self.device)  # checked: fields, ranges, finite weights (policy_file.py)
        policy_state, bounds, meta = saved.policy_state, saved.bounds, saved.meta
        obs_meta, nvec = meta.observation_space, meta.action_space.nvec
        kwargs, method, version = dict(meta.kwargs), meta.method, meta.format
        if version != _POLICY_FORMAT or method != self.name:
            raise PlacementGymError(
                f"{path} holds a {method!r} policy in format {version!r}; this is {self.name!r} (format {_POLICY_FORMAT})"
            )
        observation_space = gym.spaces.Dict(
            {
                key: gym.spaces.Box(
                    low=bounds[f"{key}.low"].cpu().numpy(),
                    high=bounds[f"{key}.high"].cpu().numpy(),
                    shape=tuple(spec.shape),
                    dtype=np.dtype(spec.dtype),
                )
                for key, spec in obs_meta.items()
            }
        )
        if np.ndim(nvec) == 0:
            action_space = gym.spaces.Discrete(int(nvec))
        else:
            action_space = gym.spaces.MultiDiscrete(np.asarray(nvec, dtype=np.int64))
        fresh = type(self)(device=self.device, **kwargs)
        env = None if env is None else fresh.policy_env(env)
        if env is not None and (
            env.observation_space != observation_space or env.action_space != action_space
        ):
            raise PlacementGymError(
                f"env spaces differ from the saved policy's; pad the graph with the same max_nodes/max_edges "
                f"on the same platform (policy: {action_space}, env: {env.action_space})"
            )
        policy, policy_kwargs = fresh.policy()
        target = env if env is not None else _SpacesOnly(observation_space, action_space)
        model = self.algo_class(
            policy,
            DummyVecEnv([lambda: target]),
            policy_kwargs={**policy_kwargs, **fresh.extra_policy_kwargs},
            device=self.device,
            **fresh.algo_kwargs,
        )
        try:
            model.policy.load_state_dict(policy_state)
        except (RuntimeError, KeyError) as exc:
            raise PlacementGymError(f"{path}: the weights do not fit the saved architecture ({exc})") from exc
        for name, value in vars(fresh).items():
            if name not in ("model", "device", "fine_tune"):
                setattr(self, name, value)
        return model

    def _require_model(self) -> BaseAlgorithm:
        if self.model is None:
            raise PlacementGymError(f"{self.name}: no trained model; call place() or load() first")
        return self.model


class _SpacesOnly(gym.Env):
    """The spaces of a loaded policy, for building its SB3 model when no env is attached; it cannot step."""

    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        raise PlacementGymError(
            "a loaded policy has no env; pass env= to load() or use predict_placement(env)"
        )

    def step(self, action):
        raise PlacementGymError(
            "a loaded policy has no env; pass env= to load() or use predict_placement(env)"
        )


def _nvec(space: gym.spaces.Space) -> int | list[int]:
    """``Discrete(n)``: ``n``; ``MultiDiscrete``: its ``nvec`` as a list."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    return np.asarray(space.nvec).tolist()


def _versions() -> dict[str, str]:
    import stable_baselines3

    import placement_gym

    return {
        "placement_gym": placement_gym.__version__,
        "torch": torch.__version__,
        "stable_baselines3": stable_baselines3.__version__,
    }


class _GNNMethod(SB3Method):
    """An SB3 method with the GNN policy.

    Args:
        gnn: ``"gcn"``, ``"gat"`` or ``"sage"``.
        hidden: Node embedding width.
        layers: Message-passing layers.
        head: Hidden widths of the per-node logit MLP and of the value MLP.
        observation: ``"graph"`` or ``"device"`` (device-aware keys, see ``DevicePlacementEnv``): train
            on a view of the given env's problem with that observation; ``None``: the env's own.
        positional: Sinusoidal group-index features of the extractor (0: none).
        pair_bias_scale: Scale of the per-(group, device) logit bias of the head (0: none).
        **kwargs: :class:`SB3Method` arguments and algorithm hyperparameters.
    """

    policy_class: ClassVar[type] = GNNActorCriticPolicy

    def __init__(
        self,
        gnn: str = "sage",
        hidden: int = 64,
        layers: int = 3,
        head: tuple[int, ...] = (64,),
        observation: str | None = "device",
        positional: int = _ONESHOT.policy_kwargs["features_extractor_kwargs"]["positional"],
        pair_bias_scale: float = _ONESHOT.policy_kwargs["pair_bias_scale"],
        **kwargs: Any,
    ) -> None:
        if observation not in (None, *OBSERVATIONS):
            raise UnknownNameError("observation", str(observation), OBSERVATIONS)
        self.extractor = extractor_class(gnn)
        self.gnn, self.hidden, self.layers, self.head = gnn, hidden, layers, list(head)
        self.observation = observation
        self.positional, self.pair_bias_scale = int(positional), float(pair_bias_scale)
        super().__init__(**kwargs)

    @property
    def track(self) -> str:  # type: ignore[override]
        """``white-box`` with the device-aware observation (it reads the cost model), else ``black-box``."""
        return "white-box" if self.observation == "device" else "black-box"

    def policy_env(self, env: gym.Env) -> gym.Env:
        """A view of ``env``'s problem with this method's observation (``env`` itself if it has it)."""
        inner = env.unwrapped
        if self.observation is None or inner.observation == self.observation:
            return env
        return DevicePlacementEnv(
            problem=problem_of(env),
            observation=self.observation,
            mode=inner.mode,
            sequential_reward=inner.sequential_reward,
            initial_placement=inner.initial_placement,
            max_nodes=inner.max_nodes,
            max_edges=inner.max_edges,
        )

    def policy(self) -> tuple[Any, dict[str, Any]]:
        return self.policy_class, {
            "features_extractor_class": self.extractor,
            "features_extractor_kwargs": {
                "hidden": self.hidden,
                "layers": self.layers,
                "positional": self.positional,
            },
            "net_arch": {"pi": self.head, "vf": self.head},
            "pair_bias_scale": self.pair_bias_scale,
        }


# The ablation's settings (ppo_mlp keeps them). Short rollouts and few epochs: the joint ratio of N
# per-group probabilities leaves PPO's clip range within a few gradient steps, so frequent small updates
# learn fastest. The GNN methods take theirs from the recipe (agents.sb3.recipe).
_PPO_DEFAULTS: dict[str, Any] = {
    "learning_rate": 1e-3,
    "n_steps": 16,
    "batch_size": 16,
    "n_epochs": 2,
    "gamma": 1.0,
    "gae_lambda": 1.0,
    "ent_coef": 0.0,
}


class PPOGNN(_GNNMethod):
    """PPO with the GNN per-node policy."""

    name = "ppo_gnn"
    algo_class = PPO
    defaults = _ONESHOT.hyperparams
    budget_scaled_learning_rate = True


class MaskablePPOGNN(_GNNMethod):
    """sb3-contrib MaskablePPO with the GNN per-node policy; devices the env masks are never sampled."""

    name = "maskable_ppo_gnn"
    algo_class = MaskablePPO
    policy_class = MaskableGNNActorCriticPolicy
    defaults = recipe("oneshot", "maskable_ppo").hyperparams
    budget_scaled_learning_rate = True


class A2CGNN(_GNNMethod):
    """A2C with the GNN per-node policy."""

    name = "a2c_gnn"
    algo_class = A2C
    defaults = recipe("oneshot", "a2c").hyperparams


class PPOMLP(SB3Method):
    """PPO with SB3's ``MultiInputPolicy`` (an MLP on the flattened padded observation): the ablation of
    the GNN. Its action head is one dense layer to all ``N * D`` logits, so it is tied to one padding.

    Args:
        net_arch: Hidden widths of the actor and critic MLPs.
        **kwargs: :class:`SB3Method` arguments and PPO hyperparameters.
    """

    name = "ppo_mlp"
    algo_class = PPO
    defaults = _PPO_DEFAULTS

    def __init__(self, net_arch: tuple[int, ...] = (64, 64), **kwargs: Any) -> None:
        self.net_arch = list(net_arch)
        super().__init__(**kwargs)

    def policy(self) -> tuple[Any, dict[str, Any]]:
        return "MultiInputPolicy", {"net_arch": {"pi": self.net_arch, "vf": self.net_arch}}
