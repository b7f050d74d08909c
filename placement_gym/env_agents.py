"""Agents that step a Gymnasium env, in the protocol: ``train(env, budget, seed)``.

An RL algorithm learns by stepping an env, not by calling ``problem.evaluate``. The protocol builds that
env over the run's :class:`~placement_gym.problem.PlacementProblem` and hands it to the agent:

* a function ``train(env, budget, seed, **kwargs)`` whose first parameter is named ``env`` gets one
  :class:`~placement_gym.envs.DevicePlacementEnv`; named ``envs``, it gets a ``gymnasium.vector``
  ``SyncVectorEnv`` of ``num_envs`` copies (the function's ``num_envs`` keyword: its default or the
  spec's value; 1 without one), all over the same problem and budget, reset in the same step as they end
  (``AutoresetMode.SAME_STEP``);
* an object (or a class, instantiated per run) with such a ``train`` method, the first parameter after
  ``self`` named the same way (``agents.sb3.algorithm`` makes any Stable-Baselines3 algorithm one).

Two more keywords, read the same way as ``num_envs``, choose the env: ``observation`` (``"graph"``, the
default, or ``"device"``: the device-aware keys, computed from the cost model) and ``mdp`` (``"oneshot"``,
the default: one step places every group; or ``"improve"``: :class:`~placement_gym.envs.DevicePlacementImproveEnv`
starting from HEFT's placement, which reads the cost model). Both read the cost model, which a black-box
run refuses: such an agent declares ``track = "white-box"`` (an attribute of the function or class).

The budget of distinct placements is enforced inside the env by :class:`BudgetWrapper`: the step that
evaluates the last placement of the budget, and every step after it, returns ``truncated=True`` with
``info["budget_exhausted"] = True`` (and ``info["stalled"] = True`` when the run ended because it stalled);
once the budget is spent a step evaluates nothing (reward 0, the last observation again). The exception a
spent budget raises in the problem never reaches the learner. ``train`` should return when it sees the flag
(an SB3 algorithm is stopped by a callback); it may return a placement, else the run's best placement
counts. The row is the same as for any other agent.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from placement_gym import errors
from placement_gym.budget import Run
from placement_gym.errors import BudgetExhaustedError, ConfigError, UnknownNameError
from placement_gym.problem import PlacementProblem

#: Names of the first parameter of ``train`` that make an agent an env-stepping one (single, vector env).
ENV_PARAMETERS = ("env", "envs")
OBSERVATIONS = ("graph", "device")
MDPS = ("oneshot", "improve")


@dataclass
class EnvOptions:
    """The env an agent asked for (see the module docstring)."""

    vector: bool = False
    num_envs: int = 1
    observation: str = "graph"
    mdp: str = "oneshot"


@dataclass
class BudgetState:
    """What the wrappers of one run share: the run, and whether its budget was spent or it stalled."""

    run: Run
    exhausted: bool = False
    stalled: bool = False

    @property
    def spent(self) -> bool:
        return self.exhausted or self.run.exhausted

    def flags(self) -> dict[str, bool]:
        return {"budget_exhausted": True, "stalled": True} if self.stalled else {"budget_exhausted": True}


class BudgetWrapper(gym.Wrapper):
    """Ends episodes with ``truncated=True`` and ``info["budget_exhausted"]`` once the run's budget is spent.

    Args:
        env: A placement env over the run's problem.
        state: The run's :class:`BudgetState` (shared by the copies of a vector env).
    """

    def __init__(self, env: gym.Env, state: BudgetState) -> None:
        super().__init__(env)
        self._state = state
        self._last_obs: Any = None

    def _spent_step(self) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self._last_obs is None:  # spent before this copy ever reset
            self._last_obs, _ = self.env.reset()
        return self._last_obs, 0.0, False, True, self._state.flags()

    def step(self, action: Any):
        state = self._state
        if state.spent:
            return self._spent_step()
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except BudgetExhaustedError as exc:  # a new placement past the budget (or a stall)
            state.exhausted = True
            stalled = getattr(errors, "RunStalledError", None)
            state.stalled = stalled is not None and isinstance(exc, stalled)
            return self._spent_step()
        self._last_obs = obs
        if state.spent:  # this step evaluated the budget's last placement
            info = {**info, **state.flags()}
            truncated = True
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        try:
            obs, info = self.env.reset(seed=seed, options=options)
        except BudgetExhaustedError:  # a start placement (improvement MDP) past the budget
            self._state.exhausted = True
            if self._last_obs is None:
                raise
            return self._last_obs, self._state.flags()
        self._last_obs = obs
        return obs, ({**info, **self._state.flags()} if self._state.spent else info)

    def action_masks(self) -> np.ndarray:
        """The env's action masks (for sb3-contrib's MaskablePPO)."""
        return self.env.get_wrapper_attr("action_masks")()


# ---------------------------------------------------------------------- recognising an env agent
def _train_callable(agent: Any) -> Any:
    """The callable whose first parameter names the env: ``agent.train`` or the function itself."""
    if inspect.isclass(agent):
        return getattr(agent, "train", None)
    train = getattr(agent, "train", None)
    if callable(train) and not hasattr(agent, "place"):
        return train
    return agent if callable(agent) and not hasattr(agent, "place") else None


def _first_parameter(fn: Any, skip_self: bool) -> str | None:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    params = params[1:] if skip_self and params else params
    return params[0].name if params else None


def is_env_agent(agent: Any) -> bool:
    """Whether ``agent`` steps an env: ``train(env|envs, budget, seed)``, as a function or a method."""
    fn = _train_callable(agent)
    if fn is None:
        return False
    return _first_parameter(fn, skip_self=inspect.isclass(agent)) in ENV_PARAMETERS


def env_options(agent: Any) -> EnvOptions:
    """The env ``agent`` asks for: its ``num_envs``, ``observation`` and ``mdp`` (attribute, bound keyword
    or default of its ``train``), and whether ``train`` takes ``envs``.

    Raises:
        ConfigError, UnknownNameError: For a bad value.
    """
    fn = _train_callable(agent)
    values: dict[str, Any] = {}
    try:
        for p in inspect.signature(fn).parameters.values():
            if p.default is not inspect.Parameter.empty:
                values[p.name] = p.default
    except (TypeError, ValueError):
        pass
    if isinstance(agent, functools.partial):
        values.update(agent.keywords)
    for name in ("num_envs", "observation", "mdp"):
        if not callable(agent) or hasattr(agent, "train"):
            if hasattr(agent, name):
                values[name] = getattr(agent, name)
    options = EnvOptions(
        vector=_first_parameter(fn, skip_self=inspect.isclass(agent)) == "envs",
        num_envs=values.get("num_envs", 1),
        observation=values.get("observation", "graph"),
        mdp=values.get("mdp", "oneshot"),
    )
    n = options.num_envs
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= 1024:
        raise ConfigError(f"num_envs must be an integer from 1 to 1024, got {n!r}")
    if options.observation not in OBSERVATIONS:
        raise UnknownNameError("observation", str(options.observation), OBSERVATIONS)
    if options.mdp not in MDPS:
        raise UnknownNameError("MDP", str(options.mdp), MDPS)
    if options.mdp == "improve" and options.observation != "graph":
        raise ConfigError("the improvement MDP's observation is always device-aware: leave observation unset")
    return options


# ---------------------------------------------------------------------- running one
def make_env(problem: PlacementProblem, options: EnvOptions, state: BudgetState) -> gym.Env:
    """One env over ``problem`` as ``options`` say, wrapped in the run's :class:`BudgetWrapper`."""
    from placement_gym.envs import DevicePlacementEnv, DevicePlacementImproveEnv

    if options.mdp == "improve":
        env: gym.Env = DevicePlacementImproveEnv(problem=problem)
    else:
        env = DevicePlacementEnv(problem=problem, observation=options.observation)
    return BudgetWrapper(env, state)


def train_in_env(agent: Any, problem: PlacementProblem, run: Run, seed: int) -> tuple[Any, dict[str, Any]]:
    """Run an env agent (:func:`is_env_agent`) in the env the protocol builds over ``problem``.

    Returns:
        What ``train`` returned (a placement, or ``None`` for the run's best) and the row's extras:
        ``stopped_by_budget`` when the budget was spent, ``stalled`` when the run stalled.
    """
    options = env_options(agent)
    if inspect.isclass(agent):
        agent = agent()  # a fresh instance per run
    fn = _train_callable(agent)
    state = BudgetState(run)
    if options.vector:
        from gymnasium.vector import AutoresetMode, SyncVectorEnv

        fns = [functools.partial(make_env, problem, options, state) for _ in range(options.num_envs)]
        env: Any = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    else:
        env = make_env(problem, options, state)
    returned = fn(env, run.budget, seed)  # closing the envs would close the problem: the protocol does
    extra: dict[str, Any] = {}
    if state.spent and run.budget is not None:
        extra["stopped_by_budget"] = True
    if state.stalled:
        extra["stalled"] = True
    return returned, extra
