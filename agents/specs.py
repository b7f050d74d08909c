"""Method specs: the one parser of ``name[:key=value,...]`` and ``pkg.module:attr[:key=value,...]``.

A spec names a method and its arguments as text, as ``bench --methods`` and result rows hold them:

* ``milp:time_limit=30,warm_start=false``: a method of :data:`agents.METHODS` with keyword arguments;
* ``my_pkg.my_module:MyAgent:lr=0.01``: an outside agent, a class with a ``place()`` method (a
  :class:`~agents.base.PlacementMethod` subclass, say), built with the keyword arguments;
* ``my_pkg.my_module:my_place``: an outside agent as a function ``my_place(problem, budget, seed, **kw)``;
* ``my_module:train``: an agent that steps an env, ``train(env, budget, seed, **kw)`` (a function, or a class
  with such a method; see :mod:`placement_gym.env_agents`);
* ``stable_baselines3:PPO:n_steps=64``: a Stable-Baselines3 ``BaseAlgorithm`` subclass by import path, with
  its policy and keyword arguments (:mod:`agents.sb3.algorithm`).

A module that is not importable is also looked for in the current folder (appended to ``sys.path``, so it
never shadows an installed module): ``cd examples && placement-gym bench --methods my_agent:greedy``.

Every argument is checked against the constructor's (or function's) signature and type hints before
anything runs: an unknown keyword is refused with the nearest known one, a value must convert to the
hinted type (``int``, ``float``, ``bool``, ``str``, ``None``, ``Literal``, tuples and lists as
``[1,2]``), numbers must be finite, and they must lie in the :class:`~placement_gym.validation.Range`
the class declares in ``argument_ranges`` (or in an ``Annotated`` hint), whose ``memory`` refuses a
size that would not fit in memory. A spec is normalised: arguments in signature order, values
rendered one way (``time_limit=30`` and ``time_limit=30.0`` are the same spec, ``milp:time_limit=30``),
so two specs are the same method exactly when their texts are equal.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import os
import re
import sys
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents import METHODS, method_class
from placement_gym.errors import ConfigError, PlacementGymError, UnknownNameError
from placement_gym.validation import Range

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT = re.compile(r"[+-]?[0-9]+\Z")
_TRUE, _FALSE, _NONE = {"true", "True"}, {"false", "False"}, {"null", "none", "None"}
#: Parameters an outside function agent receives positionally, not from the spec.
_FUNCTION_POSITIONAL = 3
#: The names the first parameter of an agent function may have: what the protocol passes it (a problem
#: or its view, an env or a vector env).
AGENT_FIRST_PARAMETERS = ("problem", "view", "env", "envs")
#: Argument names a spec may not give: the benchmark passes these to every agent (the budget from
#: ``--budget`` or the tier, the seed from ``--seeds``, the task itself).
RESERVED_ARGUMENTS = {
    "budget": "the benchmark gives every agent its budget (bench --budget, or the protocol's tier)",
    "seed": "the benchmark gives every agent its seed (bench --seeds)",
    "problem": "the benchmark passes the task to the agent",
    "view": "the benchmark passes the task to the agent",
    "target": "the benchmark passes the task to the agent",
    "env": "the benchmark builds the env and passes it to the agent",
    "envs": "the benchmark builds the env and passes it to the agent",
}
_MAX_SPEC = 4096


@dataclass(frozen=True, eq=False)
class MethodSpec:
    """A parsed, checked method spec. Equal specs have equal :attr:`text`.

    Attributes:
        name: The registry name (``"milp"``) or the outside agent's ``"pkg.module:attr"``.
        kwargs: The checked keyword arguments, converted to their hinted types, in signature order.
        target: The class or function the spec builds.
    """

    name: str
    kwargs: dict[str, Any]
    target: Any = field(repr=False)

    @property
    def text(self) -> str:
        """The normalised spec, e.g. ``"milp:time_limit=30"``."""
        args = ",".join(f"{k}={render_value(v)}" for k, v in self.kwargs.items())
        return f"{self.name}:{args}" if args else self.name

    @property
    def registered(self) -> bool:
        """Whether the spec names a method of :data:`agents.METHODS` (not an outside agent)."""
        return self.name in METHODS

    @property
    def modules(self) -> list[str]:
        """The modules outside placement-gym that the spec names (:func:`outside_modules`): a row records
        their identity (:func:`placement_gym.results.module_versions`)."""
        return outside_modules(self.text)

    @property
    def is_function(self) -> bool:
        """Whether the target is a function ``f(problem, budget, seed, **kwargs)`` rather than a class."""
        return not inspect.isclass(self.target)

    def build(self, **extra: Any) -> Any:
        """The method: the class instantiated with the arguments (and ``extra``, which are not checked:
        values the caller sets, such as a log folder), or for a function, the function with the
        arguments bound."""
        kwargs = {**self.kwargs, **extra}
        if _is_instance_agent(self.target):
            return self.target
        if self.is_function:
            import functools

            return functools.partial(self.target, **kwargs) if kwargs else self.target
        try:
            return self.target(**kwargs)
        except (ValueError, TypeError) as exc:  # the constructor's own check of a value the spec gave
            if isinstance(exc, PlacementGymError):
                raise
            raise ConfigError(f"method {self.text}: {exc}") from exc

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MethodSpec) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def parse_spec(text: str) -> MethodSpec:
    """Parse and check a spec (see the module docstring).

    Raises:
        UnknownNameError: An unknown method, module attribute or argument name (with the nearest one).
        ConfigError: A malformed spec, an outside target that is no agent, a value of the wrong type,
            not finite, out of the declared range, or too large for memory.
    """
    if not isinstance(text, str):
        raise ConfigError(f"a method spec is text, got {type(text).__name__}")
    if len(text) > _MAX_SPEC:
        raise ConfigError(f"method spec of {len(text)} characters is too long (at most {_MAX_SPEC})")
    if not text or text != text.strip():
        raise ConfigError(f"method spec {text!r} is empty or has surrounding spaces")
    name, target, args = _split_name(text)
    raw: dict[str, str] = {}
    for item in split_arguments(args):
        key, sep, value = item.partition("=")
        if not sep or not _IDENTIFIER.match(key):
            raise ConfigError(f"method spec {text!r}: expected key=value, got {item!r}")
        if key in raw:
            raise ConfigError(f"method spec {text!r} gives argument {key!r} twice")
        raw[key] = value
    return MethodSpec(name, check_arguments(name, target, raw, from_text=True), target)


def method_spec(name: str, kwargs: dict[str, Any] | None = None) -> MethodSpec:
    """A spec from a name (or ``pkg.module:attr``) and already typed keyword arguments (JSON values,
    such as ``train --agent-kwargs``), checked like :func:`parse_spec`."""
    name, target, args = _split_name(name)
    if args:
        raise ConfigError(f"give the arguments of {name} as keyword arguments, not in the name ({args!r})")
    if not isinstance(kwargs or {}, dict):
        raise ConfigError(f"arguments of {name} must be a mapping, got {type(kwargs).__name__}")
    return MethodSpec(name, check_arguments(name, target, dict(kwargs or {}), from_text=False), target)


def spec_label(text: str) -> str:
    """A short label of a stored spec for tables (``single_device:device=cpu`` -> ``cpu_only``).

    Textual only (the spec is not checked): stored rows can name outside agents that are not importable here.
    """
    name, _, args = text.partition(":")
    if name == "single_device" and args.startswith("device=") and "," not in args:
        return f"{args[len('device='):]}_only"
    return text


def split_arguments(args: str) -> list[str]:
    """Split ``"a=1,b=[1,2]"`` at the commas outside brackets: ``["a=1", "b=[1,2]"]``."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(args):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            items.append(args[start:i])
            start = i + 1
    items.append(args[start:])
    if items == [""]:
        return []
    if any(not item for item in items):
        raise ConfigError(f"method arguments {args!r} have an empty item (a doubled or trailing comma)")
    return items


def render_value(value: Any) -> str:
    """How a value is written in a normalised spec (the inverse of the conversion :func:`parse_spec` does)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(render_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


# ---------------------------------------------------------------------- the target
def _split_name(text: str) -> tuple[str, Any, str]:
    """``(name, class or function, argument text)`` of a spec."""
    head, sep, rest = text.partition(":")
    if head in METHODS:
        return head, method_class(head), rest
    attr, _, args = rest.partition(":")
    if sep and _is_module_path(head) and attr.isidentifier():
        return f"{head}:{attr}", _outside_agent(head, attr), args
    if sep and _is_module_path(head) and attr and "=" not in attr:
        raise ConfigError(
            f"method spec {text!r}: {attr!r} is not a Python name; an agent of your own is given as "
            "pkg.module:Class or pkg.module:function"
        )
    error = UnknownNameError("method", head, METHODS)
    error.args = (f"{error.args[0]} An agent of your own is given as pkg.module:Class or pkg.module:function.",)
    raise error


def import_agent_module(module_name: str, what: str) -> types.ModuleType:
    """Import the module of an outside agent as a spec does: installed modules first, then the current
    folder (appended to ``sys.path``, so it never shadows an installed module).

    Raises:
        ConfigError: ``"<what>: cannot import '<module_name>' (...)"``.
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name.split(".")[0] or os.getcwd() in sys.path:
            raise ConfigError(f"{what}: cannot import {module_name!r} ({exc})") from exc
        sys.path.append(os.getcwd())  # a module of the current folder (after everything installed: no shadowing)
        try:
            return importlib.import_module(module_name)
        except ImportError as again:
            raise ConfigError(
                f"{what}: cannot import {module_name!r} ({again}); run from its folder or install it"
            ) from again
    except ImportError as exc:
        raise ConfigError(f"{what}: cannot import {module_name!r} ({exc})") from exc


#: The project's packages: a module of theirs that a spec names (an SB3 policy class such as
#: ``agents.sb3.policy:GNNActorCriticPolicy``) is the project's own code (a row records the project's commit).
PROJECT_PACKAGES = ("placement_gym", "agents", "experiments")
#: A ``module:attr`` reference in a spec's arguments, read generously: a dotted name before a colon.
_MODULE_REFERENCE = re.compile(r"(?<![\w.])([^\W\d][\w.]*):")


def spec_modules(spec: str) -> list[str]:
    """Every module that building the method of ``spec`` could import, read from its text (nothing is
    imported): an outside agent's module (``ppo_torch:train`` -> ``ppo_torch``, ``stable_baselines3:PPO`` ->
    ``stable_baselines3``) and each ``module:attr`` in its arguments (``policy=agents.sb3.policy:...``), in
    the text and in every string of an argument that is JSON. Read generously: text that only looks like a
    reference counts too, which can only keep a row from being rerun."""
    head, _, rest = spec.partition(":")
    modules = []
    if head not in METHODS:
        modules.append(head)
        rest = rest.partition(":")[2]
    texts = [rest]
    try:
        items = split_arguments(rest)
    except ConfigError:
        items = []
    for item in items:
        try:
            texts += _strings(json.loads(item.partition("=")[2]))
        except (ValueError, RecursionError):
            pass
    for text in texts:
        modules += _MODULE_REFERENCE.findall(text)
    return list(dict.fromkeys(modules))


def _strings(value: object) -> list[str]:
    """Every string in a JSON value (keys too)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    return []


def module_within(module: str, names: Iterable[str]) -> bool:
    """Whether ``module`` is one of ``names`` or inside one of them (``a.b`` is inside ``a``)."""
    return any(module == n or module.startswith(n + ".") for n in names)


def outside_modules(spec: str) -> list[str]:
    """The modules of ``spec`` (:func:`spec_modules`) outside the project's packages
    (:data:`PROJECT_PACKAGES`): the code of a method that the project's commit does not identify."""
    return [m for m in spec_modules(spec) if not module_within(m, PROJECT_PACKAGES)]


def _outside_agent(module_name: str, attr: str) -> Any:
    """The class with ``place()`` or the function ``f(problem, budget, seed)`` at ``module:attr``."""
    module = import_agent_module(module_name, f"method {module_name}:{attr}")
    if not hasattr(module, attr):
        public = [n for n in dir(module) if not n.startswith("_")]
        raise UnknownNameError(f"attribute of module {module_name}", attr, public)
    target = getattr(module, attr)
    where = f"{module_name}:{attr}"
    env_agent = _env_agent_target(target)
    if env_agent is not None:
        return env_agent
    if inspect.isclass(target):
        if not callable(getattr(target, "place", None)):
            raise ConfigError(
                f"method {where} is a class without a place() method; an agent is a class with "
                "place(problem, budget, seed) or train(env, budget, seed), a Stable-Baselines3 algorithm, "
                "or a function f(problem, budget, seed) or train(env, budget, seed)"
            )
        return target
    if inspect.isfunction(target) or inspect.ismethod(target) or inspect.isbuiltin(target):
        return _function_agent(target, where, attr)
    if callable(getattr(target, "place", None)):  # an instance with place(), used as it is
        return target
    raise ConfigError(
        f"method {where} is a {type(target).__name__}, not an agent: give a class with a place() method "
        "or a function f(problem, budget, seed)"
    )


def _is_instance_agent(target: Any) -> bool:
    """Whether ``target`` is an agent object (an instance with ``place()``), not a class or function."""
    return not inspect.isclass(target) and not inspect.isroutine(target) and hasattr(target, "place")


def _is_module_path(text: str) -> bool:
    """Whether ``text`` is a dotted module path (``pkg.module``; Python names, non-ASCII letters too)."""
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def _function_agent(target: Any, where: str, attr: str) -> Any:
    """``target`` if it is a function agent: callable with ``(problem, budget, seed)`` and its first
    parameter named as the protocol names what it passes (:data:`AGENT_FIRST_PARAMETERS`), so that a
    library function that happens to take three arguments (``os.path:join``, ``subprocess:call``,
    ``builtins:print``) is not run as an agent.

    Raises:
        ConfigError: Naming the function and what an agent function looks like.
    """
    try:
        signature = inspect.signature(target)
        signature.bind(*([None] * _FUNCTION_POSITIONAL))
    except (TypeError, ValueError):
        raise ConfigError(
            f"method {where} is a function that cannot be called as {attr}(problem, budget, seed)"
        ) from None
    first = next(iter(signature.parameters.values()))
    if first.name not in AGENT_FIRST_PARAMETERS or first.kind is inspect.Parameter.VAR_POSITIONAL:
        raise ConfigError(
            f"method {where} is not an agent: an agent function's first parameter is named "
            f"{' or '.join(AGENT_FIRST_PARAMETERS)} ({attr}(problem, budget, seed) or {attr}(env, budget, seed)), "
            f"this one's is {first.name!r}"
        )
    return target


def _env_agent_target(target: Any) -> Any:
    """The target of an agent that steps an env (:mod:`placement_gym.env_agents`), or ``None``: a class with
    ``train(env|envs, budget, seed)`` as it is, a Stable-Baselines3 ``BaseAlgorithm`` subclass as the
    :class:`~agents.sb3.algorithm.SB3Algorithm` that runs it. (Functions ``train(env, budget, seed)`` are
    checked like ``place`` functions.)"""
    if not inspect.isclass(target):
        return None
    if any(k.__name__ == "BaseAlgorithm" and k.__module__.startswith("stable_baselines3") for k in target.__mro__):
        if inspect.isabstract(target) or target.__name__ == "BaseAlgorithm":
            raise ConfigError(f"{target.__name__} is an abstract Stable-Baselines3 class: name an algorithm (PPO)")
        from agents.sb3.algorithm import algorithm_agent

        return algorithm_agent(target)
    from placement_gym.env_agents import is_env_agent

    return target if is_env_agent(target) else None


# ---------------------------------------------------------------------- the arguments
def parameters(target: Any) -> tuple[dict[str, Any], bool]:
    """The keyword parameters a target accepts, as ``{name: type hint}`` in signature order, and whether it
    accepts any other keyword too (a ``**kwargs`` that goes nowhere known)."""
    hints: dict[str, Any] = {}
    if _is_instance_agent(target):  # an instance is used as it is: no arguments
        return hints, False
    if not inspect.isclass(target):
        params = list(inspect.signature(target).parameters.values())[_FUNCTION_POSITIONAL:]
        open_kwargs = _collect(target, params, hints)
        return hints, open_kwargs
    open_kwargs = False
    for init, params in _constructors(target):
        open_kwargs = _collect(init, params, hints)
    forwarded = getattr(target, "forwarded_parameters", None)
    if open_kwargs and callable(forwarded):  # where the **kwargs go (an SB3 learner: its algorithm)
        for name, hint in forwarded().items():
            hints.setdefault(name, hint)
        open_kwargs = False
    return hints, open_kwargs


def _constructors(target: type) -> Iterator[tuple[Any, list[inspect.Parameter]]]:
    """``(__init__, its parameters after self)`` of each class along ``target``'s MRO that defines one, up to
    and including the first without ``**kwargs`` (the arguments go no further)."""
    for klass in target.__mro__:
        init = klass.__dict__.get("__init__")
        if klass is object:
            return
        if init is None:
            continue
        params = list(inspect.signature(init).parameters.values())[1:]
        yield init, params
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return


def _collect(fn: Any, params: list[inspect.Parameter], hints: dict[str, Any]) -> bool:
    try:
        resolved = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # annotations that do not resolve here (imported for type checking only)
        resolved = {}
    open_kwargs = False
    for p in params:
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            open_kwargs = True
        elif p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            hints.setdefault(p.name, resolved.get(p.name, _default_type(p.default)))
    return open_kwargs


def _default_type(default: Any) -> Any:
    """The hint of a parameter whose annotation does not resolve: the type of a plain default value."""
    return type(default) if type(default) in (bool, int, float, str) else Any


def argument_ranges(target: Any) -> dict[str, Range]:
    """The ranges a class declares in ``argument_ranges`` (empty for a function)."""
    ranges = getattr(target, "argument_ranges", None) if inspect.isclass(target) else None
    return dict(ranges) if isinstance(ranges, dict) else {}


def check_arguments(name: str, target: Any, values: dict[str, Any], from_text: bool) -> dict[str, Any]:
    """Check ``values`` against the target's parameters; returns them converted, in signature order."""
    _refuse_reserved(name, values)
    hints, open_kwargs = parameters(target)
    ranges = argument_ranges(target)
    for key in values:
        if key not in hints and not open_kwargs:
            if not hints:
                raise ConfigError(f"method {name} takes no arguments, got {key}={values[key]!r}")
            raise UnknownNameError(f"{name} argument", key, hints)
    out: dict[str, Any] = {}
    order = [k for k in hints if k in values] + sorted(k for k in values if k not in hints)
    for key in order:
        what = f"{name} argument {key}"
        value = _convert(values[key], hints.get(key, Any), what, from_text)
        bound = ranges.get(key) or _annotated_range(hints.get(key, Any))
        _check_numbers(value, bound, what)
        out[key] = value
    return _without_defaults(target, out)


def _refuse_reserved(name: str, values: dict[str, Any]) -> None:
    """Refuse an argument the benchmark passes itself (:data:`RESERVED_ARGUMENTS`): a spec's
    ``budget=`` would give the agent another budget than the one its row records.

    Raises:
        ConfigError: Naming the key and who gives it.
    """
    for key in values:
        if key in RESERVED_ARGUMENTS:
            raise ConfigError(f"method {name}: {key}= cannot be given in a method spec: {RESERVED_ARGUMENTS[key]}")


def defaults(target: Any) -> dict[str, Any]:
    """The default values of the keyword parameters of a target (a class's constructors along its MRO,
    as :func:`parameters` walks them; a function's parameters after the positional three)."""
    out: dict[str, Any] = {}
    if not inspect.isclass(target):
        try:
            params = list(inspect.signature(target).parameters.values())[_FUNCTION_POSITIONAL:]
        except (TypeError, ValueError):
            return out
        return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    open_kwargs = True  # until a constructor without **kwargs: the arguments then go no further
    for _, params in _constructors(target):
        for p in params:
            if p.default is not inspect.Parameter.empty:
                out.setdefault(p.name, p.default)
        open_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    if not open_kwargs:
        return out
    algorithm = getattr(target, "algorithm", None)  # a Stable-Baselines3 algorithm run as it is
    forwarded = getattr(target, "forwarded_parameters", None)
    if inspect.isclass(algorithm) and callable(forwarded):  # its **kwargs reach the algorithm unchanged
        names = set(forwarded())
        for p in inspect.signature(algorithm.__init__).parameters.values():
            if p.name in names and p.default is not inspect.Parameter.empty:
                out.setdefault(p.name, p.default)
    return out


def _without_defaults(target: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` without the arguments that equal their default as a spec writes them
    (``random_search:batch_size=32`` is ``random_search``): one method, one spec text, one row label."""
    known = defaults(target)
    return {
        k: v for k, v in kwargs.items()
        if k not in known or _rendered(known[k]) is None or _rendered(known[k]) != render_value(v)
    }  # fmt: skip


def _rendered(default: Any) -> str | None:
    """How a default value is written in a spec, or ``None`` for a value a spec cannot write."""
    if default is None or isinstance(default, (bool, int, float, str, list, tuple, dict)):
        return render_value(default)
    return None


def _annotated_range(hint: Any) -> Range | None:
    if typing.get_origin(hint) is typing.Annotated:
        return next((m for m in hint.__metadata__ if isinstance(m, Range)), None)
    return None


def _check_numbers(value: Any, bound: Range | None, what: str) -> None:
    """Every number in ``value`` is finite and, with a declared range, inside it."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{what} must be a finite number, got {value!r}")
        if bound is not None:
            bound.check(value, what)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_numbers(item, bound, what)
    elif isinstance(value, dict):
        for item in value.values():
            _check_numbers(item, None, what)


def _type_name(hint: Any) -> str:
    if hint is type(None):
        return "null"
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(h) for h in typing.get_args(hint))
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _convert(value: Any, hint: Any, what: str, from_text: bool) -> Any:
    """``value`` (text from a spec, or a JSON value) as the type ``hint`` says, or a ConfigError."""
    if from_text and value == "":
        raise ConfigError(f"{what} has an empty value")
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _convert(value, typing.get_args(hint)[0], what, from_text)
    if hint is Any or hint is inspect.Parameter.empty or isinstance(hint, (str, typing.TypeVar)):
        return _untyped(value) if from_text else value
    if origin in (typing.Union, types.UnionType):
        arms = typing.get_args(hint)
        if type(None) in arms and (value is None or (from_text and value in _NONE)):
            return None
        # the most specific reading first: "1" is an int before a float before a string
        for arm in sorted((a for a in arms if a is not type(None)), key=_specificity):
            try:
                return _convert(value, arm, what, from_text)
            except ConfigError:
                continue
        raise ConfigError(f"{what} must be {_type_name(hint)}, got {value!r}")
    if origin is typing.Literal:
        for choice in typing.get_args(hint):
            if value == choice or (from_text and value == render_value(choice)):
                return choice
        raise UnknownNameError(what, str(value), [render_value(c) for c in typing.get_args(hint)])
    if hint is type(None):
        if value is None or (from_text and value in _NONE):
            return None
        raise ConfigError(f"{what} must be null, got {value!r}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        if from_text and value in _TRUE | _FALSE:
            return value in _TRUE
        raise ConfigError(f"{what} must be true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if from_text and isinstance(value, str) and _INT.match(value):
            return int(value)
        raise ConfigError(f"{what} must be an integer, got {value!r}")
    if hint is float:
        number: Any = value
        if from_text and isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                raise ConfigError(f"{what} must be a number, got {value!r}") from None
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ConfigError(f"{what} must be a number, got {value!r}")
        if not math.isfinite(number):
            raise ConfigError(f"{what} must be a finite number, got {value!r}")
        return float(number)
    if hint is str or hint is Path:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{what} must be text, got {value!r}")
    if origin in (tuple, list) or hint in (tuple, list):
        items = _json(value, what) if from_text else value
        if not isinstance(items, (list, tuple)):
            raise ConfigError(f"{what} must be a list such as [64,64], got {value!r}")
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis or len(args) == 1:
            item_hints = [args[0]] * len(items)
        elif args:  # a fixed-length tuple
            if len(args) != len(items):
                raise ConfigError(f"{what} must have {len(args)} items, got {len(items)}")
            item_hints = list(args)
        else:
            item_hints = [Any] * len(items)
        converted = [_convert(item, h, what, False) for item, h in zip(items, item_hints)]
        return tuple(converted) if (origin or hint) is tuple else converted
    if origin is dict or hint is dict:
        data = _json(value, what) if from_text else value
        if not isinstance(data, dict):
            raise ConfigError(f"{what} must be a JSON object, got {value!r}")
        return data
    # a type a spec cannot write (a callable, a class): only a value of it given from Python
    if not from_text and inspect.isclass(hint) and isinstance(value, hint):
        return value
    raise ConfigError(f"{what} is of type {_type_name(hint)}, which a method spec cannot give")


def _specificity(hint: Any) -> int:
    order = {bool: 0, int: 1, float: 2, tuple: 3, list: 3, dict: 3, str: 5, Path: 5}
    return order.get(typing.get_origin(hint) or hint, 4)


def _json(value: Any, what: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        raise ConfigError(f"{what}: {value!r} is not valid JSON") from None


def _untyped(text: str) -> Any:
    """A value without a type hint: JSON when it parses (numbers, booleans, lists), else the text."""
    if text in _NONE:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return value


def method_track(spec: str) -> str:
    """The track (``"black-box"`` or ``"white-box"``, :mod:`placement_gym.sealing`) that the method of
    ``spec`` declares (``"ppo_gnn"``, ``"ppo_gnn:observation=graph"``, ``"my_module:my_agent"``).

    Raises:
        UnknownNameError, ConfigError: For a spec that does not parse.
    """
    from placement_gym.benchmark import agent_track

    return agent_track(parse_spec(spec).build())
