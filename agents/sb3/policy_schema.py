"""The schemas of a saved policy's ``meta.json`` and their bounds (used by :mod:`agents.sb3.policy_file`).

:class:`PolicyMeta` is an SB3 learner's (``SB3Method.save``), :class:`TransferMeta` a pretrained device-free
policy's (:mod:`agents.sb3.pretrained_ppo`); the module docstring of :mod:`agents.sb3.policy_file` says what
each allows and why.
"""

from __future__ import annotations

import inspect
import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from placement_gym.errors import PlacementGymError, quote
from placement_gym.platforms.bounds import MAX_DEVICES

#: Version of the folder layout ``SB3Method.save`` writes.
POLICY_FORMAT = 1
MAX_META_BYTES = 64 * 2**10
MAX_WEIGHTS_BYTES = 256 * 2**20
#: Most numbers all tensors of ``weights.pt`` may hold together (1 GiB of float32).
MAX_WEIGHT_ELEMENTS = 2**28
#: Widest layer (``hidden``, ``head``, ``net_arch`` entries): a 4096 x 4096 float32 matrix is 64 MiB.
MAX_WIDTH = 4096
MAX_LAYERS = 64
#: Longest rollout and largest batch, steps; epochs per update.
MAX_STEPS = 2**16
MAX_EPOCHS = 1000
#: Most floats one padded observation may have, and a rollout buffer (``n_steps`` observations).
MAX_OBSERVATION_FLOATS = 2**24
MAX_BUFFER_FLOATS = 2**28
#: Most groups (entries of a ``MultiDiscrete`` action) and choices of a ``Discrete`` one.
MAX_GROUPS = 2**16
MAX_CHOICES = 2**24
#: Any other number in ``kwargs`` (a learning rate, a coefficient, a clip range).
MAX_MAGNITUDE = 1e6
#: Algorithm and policy parameters a saved file may not set: they write files, pick a device, processes,
#: seeds or verbosity of the run that loads it, or are classes (which JSON cannot carry anyway).
DENIED = frozenset(
    {
        "tensorboard_log", "device", "verbose", "seed", "env", "policy", "_init_setup_model", "n_envs",
        "budget", "fine_tune", "threads", "rollout_buffer_class", "rollout_buffer_kwargs", "replay_buffer_class",
        "replay_buffer_kwargs", "activation_fn", "features_extractor_class", "optimizer_class",
        "observation_space", "action_space", "lr_schedule", "self",
    }
)  # fmt: skip
#: Bounds of size-like arguments, wherever they appear in ``kwargs`` (also nested, as in ``net_arch``).
SIZE_BOUNDS: dict[str, tuple[int, int]] = {
    "hidden": (1, MAX_WIDTH),
    "head": (1, MAX_WIDTH),
    "net_arch": (1, MAX_WIDTH),
    "pi": (1, MAX_WIDTH),
    "vf": (1, MAX_WIDTH),
    "layers": (1, MAX_LAYERS),
    "n_steps": (1, MAX_STEPS),
    "batch_size": (1, MAX_STEPS),
    "n_epochs": (1, MAX_EPOCHS),
}
#: Ranges of the hyperparameters with a meaning outside which training is undefined (ends inclusive).
FLOAT_BOUNDS: dict[str, tuple[float, float]] = {
    "learning_rate": (1e-12, 10.0),
    "gamma": (0.0, 1.0),
    "gae_lambda": (0.0, 1.0),
    "clip_range": (1e-6, 10.0),
    "ent_coef": (0.0, 100.0),
    "vf_coef": (0.0, 100.0),
    "max_grad_norm": (1e-6, MAX_MAGNITUDE),
    "target_kl": (1e-9, MAX_MAGNITUDE),
}
#: The method whose folders hold a transfer policy (:class:`TransferMeta`).
TRANSFER_METHOD = "pretrained_ppo"
#: Every method whose folders hold a device-free policy in :class:`TransferMeta`'s format.
TRANSFER_METHODS = (TRANSFER_METHOD, "guided_ppo")
_DTYPES = ("float32", "float64", "int64", "int32", "int8", "uint8", "bool")
_Name = Annotated[str, Field(min_length=1, max_length=64)]


class SpaceSpec(BaseModel):
    """One Box of the observation space: its shape and dtype."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shape: list[Annotated[int, Field(ge=1, le=MAX_OBSERVATION_FLOATS)]] = Field(min_length=1, max_length=4)
    dtype: Literal[_DTYPES]  # type: ignore[valid-type]

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class ActionSpec(BaseModel):
    """The action space: a ``MultiDiscrete`` as its list (devices per group), or a ``Discrete(n)`` as the
    number ``n`` (one choice among at most :data:`MAX_CHOICES`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nvec: (
        Annotated[int, Field(ge=1, le=MAX_CHOICES)]
        | Annotated[
            list[Annotated[int, Field(ge=1, le=MAX_DEVICES)]], Field(min_length=1, max_length=MAX_GROUPS)
        ]
    )


class PolicyMeta(BaseModel):
    """What ``meta.json`` may hold (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal[POLICY_FORMAT]  # type: ignore[valid-type]
    method: _Name
    algorithm: _Name
    kwargs: dict[_Name, Any] = Field(max_length=64)
    observation_space: dict[_Name, SpaceSpec] = Field(min_length=1, max_length=32)
    action_space: ActionSpec
    versions: dict[_Name, Annotated[str, Field(max_length=256)]] = Field(default_factory=dict, max_length=32)

    @model_validator(mode="after")
    def _check(self) -> PolicyMeta:
        cls = sb3_method_class(self.method)
        if self.algorithm != cls.algo_class.__name__:
            raise ValueError(
                f"algorithm {self.algorithm!r} is not {self.method}'s ({cls.algo_class.__name__})"
            )
        allowed = allowed_kwargs(cls)
        for key, value in self.kwargs.items():
            if key in DENIED or key not in allowed:
                why = (
                    "may not be set by a policy file"
                    if key in DENIED
                    else "is not an argument of " + self.method
                )
                raise ValueError(f"kwargs.{key} {why}")
            if key == "policy_kwargs":
                if not isinstance(value, dict):
                    raise ValueError("kwargs.policy_kwargs must be a mapping")
                policy_allowed = allowed_policy_kwargs(cls)
                for name in value:
                    if name in DENIED or name not in policy_allowed:
                        raise ValueError(
                            f"kwargs.policy_kwargs.{str(name)[:64]} is not an argument of its policy"
                        )
            _check_value(value, f"kwargs.{key}", key)
        obs = sum(spec.size for spec in self.observation_space.values())
        if obs > MAX_OBSERVATION_FLOATS:
            raise ValueError(f"observation_space has {obs} numbers; at most {MAX_OBSERVATION_FLOATS}")
        steps = self.kwargs.get("n_steps", 1)
        if isinstance(steps, int) and steps * obs > MAX_BUFFER_FLOATS:
            raise ValueError(
                f"a rollout of n_steps={steps} observations of {obs} numbers needs {steps * obs * 4 / 2**30:.0f} GiB; "
                f"at most {MAX_BUFFER_FLOATS * 4 / 2**30:.0f} GiB"
            )
        return self

    def padding(self, key: str, axis: int = 0) -> int:
        """``observation_space[key].shape[axis]`` (for example the padded node count of ``node_mask``).

        Raises:
            PlacementGymError: If the policy has no such space or axis.
        """
        spec = self.observation_space.get(key)
        if spec is None or len(spec.shape) <= axis:
            raise PlacementGymError(f"the policy's observation has no {key!r} of rank > {axis}")
        return spec.shape[axis]


def sb3_method_class(name: str) -> type:
    """The registered SB3 learner class called ``name``.

    Raises:
        ValueError: If ``name`` is not registered or is not an SB3 learner.
    """
    from agents import METHODS, method_class

    if name not in METHODS:
        raise ValueError(f"method {quote(name)} is not registered (known: {', '.join(sorted(METHODS))})")
    cls = method_class(name)
    if not (isinstance(cls, type) and _is_sb3(cls) and hasattr(cls, "policy")):
        raise ValueError(f"method {name!r} is not a Stable-Baselines3 learner")
    return cls


def _is_sb3(cls: type) -> bool:
    """Whether ``cls`` is an SB3 learner class (it names the Stable-Baselines3 algorithm it trains)."""
    from stable_baselines3.common.base_class import BaseAlgorithm

    algo = getattr(cls, "algo_class", None)
    return isinstance(algo, type) and issubclass(algo, BaseAlgorithm)


def _parameters(*callables: Any) -> set[str]:
    names: set[str] = set()
    for fn in callables:
        for param in inspect.signature(fn).parameters.values():
            if param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                names.add(param.name)
    return names


def allowed_kwargs(cls: type) -> set[str]:
    """The keyword arguments a saved policy of ``cls`` may record: the constructor parameters of the
    method's classes and of its algorithm (``DENIED`` ones are refused separately)."""
    inits = [k.__init__ for k in cls.__mro__ if _is_sb3(k) and "__init__" in vars(k)]
    return _parameters(*inits, cls.algo_class.__init__) | {"policy_kwargs"}


def allowed_policy_kwargs(cls: type) -> set[str]:
    """The parameters of ``cls``'s policy class (over its bases: subclasses pass ``**kwargs`` on)."""
    policy, _ = cls().policy()
    if isinstance(policy, str):
        policy = cls.algo_class.policy_aliases[policy]
    return _parameters(*(k.__init__ for k in policy.__mro__ if k is not object and "__init__" in vars(k)))


def _check_value(value: Any, where: str, context: str, depth: int = 0) -> None:
    """A bounded JSON value: finite numbers within the bounds of ``context`` (the nearest size key)."""
    if depth > 4:
        raise ValueError(f"{where} nests too deeply")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        if len(value) > 64:
            raise ValueError(f"{where} is a string of {len(value)} characters; at most 64")
        return
    if isinstance(value, (int, float)):
        low, high = SIZE_BOUNDS.get(context) or FLOAT_BOUNDS.get(context) or (-MAX_MAGNITUDE, MAX_MAGNITUDE)
        if context in SIZE_BOUNDS and not isinstance(value, int):
            raise ValueError(f"{where} = {quote(value)} must be a whole number in [{low}, {high}]")
        if not (math.isfinite(value) and low <= value <= high):
            raise ValueError(f"{where} = {quote(value)} is outside [{low:g}, {high:g}]")
        return
    if isinstance(value, list):
        if len(value) > MAX_LAYERS:
            raise ValueError(f"{where} has {len(value)} entries; at most {MAX_LAYERS}")
        for i, item in enumerate(value):
            _check_value(item, f"{where}[{i}]", context, depth + 1)
        return
    if isinstance(value, dict):
        if len(value) > 32:
            raise ValueError(f"{where} has {len(value)} keys; at most 32")
        for key, item in value.items():
            key = str(key)[:64]
            _check_value(
                item,
                f"{where}.{key}",
                key if key in SIZE_BOUNDS or key in FLOAT_BOUNDS else context,
                depth + 1,
            )
        return
    raise ValueError(f"{where} has a value of type {type(value).__name__}")


_Width = Annotated[int, Field(strict=True, ge=1, le=MAX_WIDTH)]
_Count = Annotated[int, Field(strict=True, ge=0, le=2**40)]
_Seconds = Annotated[float, Field(ge=0.0, le=1e9)]
_Frozen = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class TransferExtractor(BaseModel):
    """``DeviceFreeExtractor``'s arguments: embedding width and message-passing layers."""

    model_config = _Frozen

    hidden: _Width
    layers: Annotated[int, Field(strict=True, ge=1, le=MAX_LAYERS)]


class TransferArch(BaseModel):
    """A transfer policy's architecture: its extractor and the hidden widths of its heads."""

    model_config = _Frozen

    extractor: TransferExtractor
    head: list[_Width] = Field(min_length=1, max_length=MAX_LAYERS)

    @model_validator(mode="after")
    def _check(self) -> TransferArch:
        h, widths = self.extractor.hidden, [self.extractor.hidden, *self.head]
        params = 2 * self.extractor.layers * h * h + sum(a * b for a, b in zip(widths, widths[1:]))
        if params > MAX_WEIGHT_ELEMENTS:
            raise ValueError(f"arch needs about {params} parameters; at most {MAX_WEIGHT_ELEMENTS}")
        return self


def _bounded(name: str) -> Any:
    low, high = FLOAT_BOUNDS[name]
    return Field(default=None, ge=low, le=high)


class TransferPPO(BaseModel):
    """The MaskablePPO hyperparameters a transfer policy is fine-tuned with (``n_steps`` is set per use)."""

    model_config = _Frozen

    batch_size: Annotated[int, Field(strict=True, ge=1, le=MAX_STEPS)]
    learning_rate: float | None = _bounded("learning_rate")
    n_epochs: Annotated[int, Field(strict=True, ge=1, le=MAX_EPOCHS)] | None = None
    gamma: float | None = _bounded("gamma")
    gae_lambda: float | None = _bounded("gae_lambda")
    ent_coef: float | None = _bounded("ent_coef")
    vf_coef: float | None = _bounded("vf_coef")
    clip_range: float | None = _bounded("clip_range")
    max_grad_norm: float | None = _bounded("max_grad_norm")
    target_kl: float | None = _bounded("target_kl")

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments for ``MaskablePPO`` (the ones the file sets)."""
        return self.model_dump(exclude_none=True)


class TrainingRecord(BaseModel):
    """How a transfer policy was pretrained: its cost, its settings and the command that trains it."""

    model_config = _Frozen

    chunks: _Count | None = None
    env_steps: _Count | None = None
    evaluations: _Count | None = None
    wall_s: _Seconds | None = None
    cpu_s: _Seconds | None = None
    cores: Annotated[int, Field(strict=True, ge=1, le=MAX_GROUPS)] | None = None
    load_1min_mean: Annotated[float, Field(ge=0.0, le=1e6)] | None = None
    models: list[_Name] | None = Field(default=None, max_length=64)
    platforms: list[_Name] | None = Field(default=None, max_length=64)
    synthetic: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    n_envs: Annotated[int, Field(strict=True, ge=1, le=1024)] | None = None
    chunk: Annotated[int, Field(strict=True, ge=1, le=MAX_STEPS)] | None = None
    max_steps: Annotated[int, Field(strict=True, ge=1, le=MAX_STEPS)] | None = None
    #: Move kinds of the improvement env, comma-separated (``DevicePlacementImproveEnv`` checks the names).
    moves: Annotated[str, Field(max_length=64, pattern=r"^[a-z_]+(,[a-z_]+)*$")] | None = None
    seed: Annotated[int, Field(strict=True, ge=0, le=2**32 - 1)] | None = None
    arch: TransferArch | None = None
    ppo: TransferPPO | None = None
    #: Imitation (``guided_ppo``): placements whose whole neighbourhood was simulated, moves simulated,
    #: listwise epochs.
    placements: _Count | None = None
    simulated_moves: _Count | None = None
    epochs: _Count | None = None
    command: Annotated[str, Field(max_length=4096)] | None = None


class TransferMeta(BaseModel):
    """What a transfer policy's ``meta.json`` may hold (see the module docstring)."""

    model_config = _Frozen

    format: Literal[POLICY_FORMAT]  # type: ignore[valid-type]
    method: Literal[TRANSFER_METHODS]  # type: ignore[valid-type]
    arch: TransferArch
    ppo: TransferPPO
    training: TrainingRecord = Field(default_factory=TrainingRecord)
