"""Agents named by a method spec: a registered method, or your own class or function.

A spec is ``name[:key=value,...]`` (a method of :data:`agents.METHODS`) or
``package.module:attribute[:key=value,...]`` (your own agent: a :class:`~agents.base.PlacementMethod`
subclass, any class whose instances have ``place``, or a function ``place(problem, budget, seed) ->
placement``). Keyword arguments go to the class's constructor, or are bound to the function; they are
checked against its signature before anything runs. A module not found on the path is looked for in the
current folder too (as ``python -m`` does), so ``cd examples && placement-gym bench --methods
my_agent:greedy`` works.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from agents import METHODS, method_class
from placement_gym.errors import ConfigError, UnknownNameError


@dataclass(frozen=True)
class Spec:
    """A parsed method spec.

    Attributes:
        target: A registered method name, or ``module:attribute``.
        kwargs: Keyword arguments (values parsed as JSON where possible, else strings).
        external: True for ``module:attribute`` (your own agent).
    """

    target: str
    kwargs: dict[str, Any]
    external: bool

    @property
    def name(self) -> str:
        """The registered name, or the attribute's name for an external agent."""
        return self.target.rsplit(":", 1)[-1]


def _parse_kwargs(text: str, spec: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ConfigError(
                f"method spec {spec!r}: {item!r} is not key=value (e.g. heft, milp:time_limit=60)"
            )
        if key in kwargs:
            raise ConfigError(f"method spec {spec!r}: argument {key!r} given twice")
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    return kwargs


def parse_spec(spec: str) -> Spec:
    """Parse ``name[:k=v,...]`` or ``module:attribute[:k=v,...]``.

    The second form is recognised by its second part having no ``=`` (``my_agent:greedy``,
    ``my_pkg.mod:MyAgent:steps=3``).

    Raises:
        ConfigError: For an empty part or an argument that is not ``key=value``.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"a method spec is a non-empty string, got {spec!r}")
    parts = spec.split(":")
    if len(parts) >= 2 and "=" not in parts[1]:
        module, attribute = parts[0], parts[1]
        if (
            not module
            or not attribute
            or not all(p.isidentifier() for p in (module.split(".") + [attribute]))
        ):
            raise ConfigError(f"method spec {spec!r}: expected package.module:attribute[:key=value,...]")
        return Spec(f"{module}:{attribute}", _parse_kwargs(":".join(parts[2:]), spec), True)
    return Spec(parts[0], _parse_kwargs(":".join(parts[1:]), spec), False)


def _import(module: str, spec: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module.split(".")[0] or os.getcwd() in sys.path:
            raise ConfigError(f"method spec {spec!r}: cannot import {module!r}: {exc}") from None
    sys.path.insert(0, os.getcwd())  # as `python -m` would: modules of the current folder
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"method spec {spec!r}: no module {module!r} on the path or in {os.getcwd()} "
            f"({exc}); run from its folder or install it"
        ) from None


def _check_arguments(fn: Any, kwargs: dict[str, Any], spec: str, skip: int = 0) -> None:
    """Refuse keyword arguments ``fn`` does not take (``skip``: leading positional ones bound later)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins without a signature: let the call decide
    params = list(signature.parameters.values())[skip:]
    try:
        signature.replace(parameters=params).bind_partial(**kwargs)
    except TypeError as exc:
        names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        raise ConfigError(
            f"method spec {spec!r}: {exc}; it takes: {', '.join(names) or 'no arguments'}"
        ) from None


def resolve_agent(spec: str) -> Any:
    """The agent ``spec`` names, ready to run: a :class:`~agents.base.PlacementMethod` (or other object
    with ``place``) instance, or a function ``place(problem, budget, seed)`` with its arguments bound.

    Raises:
        UnknownNameError: For an unknown registered method (suggests near names).
        ConfigError: For a module or attribute that cannot be found, an attribute that is not an agent,
            or arguments the agent does not take.
    """
    parsed = parse_spec(spec)
    if not parsed.external:
        if parsed.target not in METHODS:
            error = UnknownNameError("method", parsed.target, METHODS)
            error.args = (f"{error.args[0]} Your own agent: package.module:attribute[:key=value,...].",)
            raise error
        cls = method_class(parsed.target)
        _check_arguments(cls, parsed.kwargs, spec)
        return cls(**parsed.kwargs)
    module_name, attribute = parsed.target.split(":")
    if module_name in METHODS:
        raise ConfigError(
            f"method spec {spec!r}: {module_name} is a registered method and its arguments are key=value "
            f"(e.g. {module_name}:{attribute}=...); known methods: {', '.join(sorted(METHODS))}"
        )
    module = _import(module_name, spec)
    if not hasattr(module, attribute):
        public = [n for n in vars(module) if not n.startswith("_")]
        raise UnknownNameError(f"attribute of module {module_name}", attribute, public)
    obj = getattr(module, attribute)
    if inspect.isclass(obj):
        if not callable(getattr(obj, "place", None)):
            raise ConfigError(f"method spec {spec!r}: class {attribute} has no place() method")
        _check_arguments(obj, parsed.kwargs, spec)
        return obj(**parsed.kwargs)
    if callable(getattr(obj, "place", None)):
        if parsed.kwargs:
            raise ConfigError(f"method spec {spec!r}: {attribute} is an instance; arguments need a class")
        return obj
    if callable(obj):
        _check_arguments(obj, parsed.kwargs, spec, skip=3)
        return functools.partial(obj, **parsed.kwargs) if parsed.kwargs else obj
    raise ConfigError(
        f"method spec {spec!r}: {attribute} is a {type(obj).__name__}, not a class with place() or a function"
    )


def seedless(spec: str) -> bool:
    """True for a registered method whose result does not depend on the seed (run once per task)."""
    parsed = parse_spec(spec)
    return not parsed.external and parsed.target in SEEDLESS


#: Registered methods whose result does not depend on the seed.
SEEDLESS = frozenset({"single_device", "heft", "m_topo", "m_etf", "m_sct", "milp", "moirai", "exact"})
