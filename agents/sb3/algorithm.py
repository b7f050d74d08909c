"""Any Stable-Baselines3 algorithm class as an env agent of the protocol, named by import path.

``bench --methods 'stable_baselines3:PPO:n_steps=64'`` (or ``sb3_contrib:MaskablePPO``, or a
``BaseAlgorithm`` subclass of your own as ``my_module:MyAlgo``) makes an :class:`SB3Algorithm`: an object
with ``train(envs, budget, seed)`` (:mod:`placement_gym.env_agents`). The protocol builds the env; the
algorithm is built on it with the spec's arguments and learns until the budget of distinct placements is
spent (a callback stops it at the env's ``info["budget_exhausted"]``) or after ``total_timesteps`` env steps;
the run's best placement makes the row.

The spec's arguments are the algorithm's own keyword arguments (``learning_rate``, ``n_steps``, ...; checked
against its signature) and:

* ``policy``: an SB3 policy name (default ``MultiInputPolicy``, for the envs' ``Dict`` observations) or a
  policy class as ``module:Class`` (``agents.sb3.policy:GNNActorCriticPolicy``);
* ``policy_kwargs``: a JSON object; a value of a key ending in ``_class`` may be ``module:Class``
  (``{"features_extractor_class":"agents.sb3.extractors:SAGEExtractor"}``);
* ``observation``, ``mdp``, ``num_envs``: the env the protocol builds (see :mod:`placement_gym.env_agents`);
* ``total_timesteps``: env steps at most (default ``2 * budget``; steps that repeat a placement cost no budget).

``env`` and ``seed`` are the protocol's and cannot be given. With ``observation=device`` or ``mdp=improve`` the
env reads the cost model, so the run is in the white-box track (:attr:`SB3Algorithm.track`). sb3-contrib's ``MaskablePPO`` gets the env's
action masks (groups masked off devices they do not fit on).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, ClassVar, Literal

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from agents.determinism import deterministic_torch
from agents.sb3.methods import SB3Method
from placement_gym.errors import ConfigError
from placement_gym.validation import Range

#: Env steps per distinct placement of the budget that a learner may take at most (``total_timesteps``).
STEPS_PER_PLACEMENT = 2


class StopAtBudget(BaseCallback):
    """Stops ``learn`` at the first step whose info says the budget is spent."""

    def _on_step(self) -> bool:
        return not any(info.get("budget_exhausted") for info in self.locals.get("infos", ()))


def _resolve(path: str, what: str) -> Any:
    """The attribute ``module:attr`` names."""
    module, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{what} {path!r} cannot be imported ({exc})") from exc


class SB3Algorithm:
    """An SB3 algorithm class (:attr:`algorithm`) run by the protocol; make one with :func:`algorithm_agent`.

    Args:
        policy: SB3 policy name or ``module:Class``.
        policy_kwargs: Policy arguments (``*_class`` values may be ``module:Class``).
        observation: ``"graph"`` or ``"device"`` (the env's observation).
        mdp: ``"oneshot"`` or ``"improve"``.
        num_envs: Env copies stepped together (an SB3 ``DummyVecEnv``).
        total_timesteps: Env steps at most (``None``: ``2 * budget``).
        device: Torch device.
        **algo_kwargs: The algorithm's own keyword arguments.
    """

    algorithm: ClassVar[type[BaseAlgorithm]]
    argument_ranges: ClassVar[dict[str, Range]] = {
        **SB3Method.argument_ranges,
        "num_envs": Range(1, 1024),
        "total_timesteps": Range(1, memory=lambda n: 24.0 * n),
    }

    def __init__(
        self,
        policy: str = "MultiInputPolicy",
        policy_kwargs: dict[str, Any] | None = None,
        observation: Literal["graph", "device"] = "graph",
        mdp: Literal["oneshot", "improve"] = "oneshot",
        num_envs: int = 1,
        total_timesteps: int | None = None,
        device: str = "cpu",
        **algo_kwargs: Any,
    ) -> None:
        self.policy = _resolve(policy, "policy") if ":" in policy else policy
        self.policy_kwargs = {
            k: _resolve(v, f"policy_kwargs[{k!r}]") if k.endswith("_class") and isinstance(v, str) else v
            for k, v in (policy_kwargs or {}).items()
        }
        self.observation, self.mdp, self.num_envs = observation, mdp, num_envs
        self.total_timesteps, self.device, self.algo_kwargs = total_timesteps, device, algo_kwargs
        self.model: BaseAlgorithm | None = None

    @property
    def track(self) -> str:
        """``"white-box"`` when the env reads the cost model (``observation="device"``, ``mdp="improve"``),
        else ``"black-box"`` (:func:`placement_gym.benchmark.agent_track`)."""
        return "white-box" if self.observation == "device" or self.mdp == "improve" else "black-box"

    @classmethod
    def forwarded_parameters(cls) -> dict[str, Any]:
        """The algorithm's keyword parameters a spec can give (for :mod:`agents.specs`)."""
        own = {"policy", "env", "seed", "device", "policy_kwargs", "_init_setup_model"}
        optional = {"target_kl": float | None, "clip_range_vf": float | None, "tensorboard_log": str | None}
        hints = {}
        for p in list(inspect.signature(cls.algorithm.__init__).parameters.values())[1:]:
            if p.name in own or p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
                continue
            if p.name in optional or type(p.default) in (bool, int, float, str):
                hints[p.name] = optional.get(p.name, type(p.default))
        return hints

    def train(self, envs: Any, budget: int | None, seed: int) -> None:
        """Learn on the protocol's vector env (its copies, in an SB3 ``DummyVecEnv``) until the budget is spent."""
        vec = DummyVecEnv([lambda e=e: Monitor(e) for e in envs.envs])
        steps = self.total_timesteps or STEPS_PER_PLACEMENT * (budget or 1000)
        with deterministic_torch(seed):  # one thread, seeded: a rerun repeats the run
            self.model = self.algorithm(
                self.policy, vec, policy_kwargs=self.policy_kwargs or None, seed=seed, device=self.device,
                **self.algo_kwargs,
            )  # fmt: skip
            self.model.learn(total_timesteps=steps, callback=StopAtBudget())


_CLASSES: dict[type, type[SB3Algorithm]] = {}


def algorithm_agent(algorithm: type[BaseAlgorithm]) -> type[SB3Algorithm]:
    """The :class:`SB3Algorithm` subclass that runs ``algorithm`` (one per algorithm class)."""
    if algorithm not in _CLASSES:
        _CLASSES[algorithm] = type(
            algorithm.__name__, (SB3Algorithm,), {"algorithm": algorithm, "__module__": __name__}
        )
    return _CLASSES[algorithm]
