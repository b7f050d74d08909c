"""Devices and platforms, described by data (YAML files in this folder), not code.

A :class:`Platform` is a list of :class:`Device` s and the :class:`Link` s between them. A device says how
to reach it in OpenVINO (device string, compile properties, an explicit inference precision) and, for
the simulator, its performance profile. ``local`` is special: it is built from what
``openvino.Core().available_devices`` offers on this machine (see :func:`local_platform`).

A device's memory is either absolute (``memory_bytes``) or relative to the model (``memory_fraction``: a
share of the model's weight bytes). Relative memory models the model-parallel setting (Mirhoseini et al.,
"Device Placement Optimization with Reinforcement Learning", ICML 2017: a model too large for any one
device) for models of any size; :func:`resolve_memory` turns it into bytes once the model is known
(:meth:`placement_gym.problem.PlacementProblem.make` does it).
"""

from __future__ import annotations

import dataclasses
import math
import os
from numbers import Real
from pathlib import Path
from typing import Any

from placement_gym.errors import ConfigError, UnknownNameError
from placement_gym.files import load_yaml
from placement_gym.platforms.devices import KINDS, PRECISIONS, Device, Link, Platform
from placement_gym.platforms.schema import validate_platform

__all__ = [
    "KINDS",
    "PRECISIONS",
    "Device",
    "Link",
    "Platform",
    "load_platform",
    "platform_from_dict",
    "platform_names",
    "resolve_memory",
]

_DIR = Path(__file__).parent
_SUFFIXES = (".yaml", ".yml")


def platform_from_dict(data: Any, source: str = "platform") -> Platform:
    """Build a platform from its YAML/dict form (see the files in this folder).

    The data is first checked against :mod:`placement_gym.platforms.schema` (types, required and
    unknown fields, finite numbers, a ``host`` and link ends that name devices).

    Args:
        data: The parsed file.
        source: Where it came from (file path or name), for error messages.

    Raises:
        ConfigError: If the data does not follow the schema.
    """
    spec = validate_platform(data, source)
    devices = tuple(
        Device(**{**d.model_dump(), "memory_bytes": None if d.memory_bytes is None else int(d.memory_bytes)})
        for d in spec.devices
    )
    index = {d.name: i for i, d in enumerate(devices)}
    links: dict[tuple[int, int], Link] = {}
    if spec.default_link is not None:
        default = Link(**spec.default_link.model_dump())
        links = {(i, j): default for i in range(len(devices)) for j in range(len(devices)) if i != j}
    for link in spec.links:
        i, j = index[link.src], index[link.dst]
        links[(i, j)] = Link(link.latency, link.bandwidth, link.blocked_bandwidth)
        if link.bidirectional:
            links[(j, i)] = links[(i, j)]
    return Platform(
        name=spec.name,
        description=spec.description,
        devices=devices,
        links=links,
        host=index[spec.host] if spec.host is not None else 0,
        sources=tuple(spec.sources),
    )


def resolve_memory(platform: Platform, weight_bytes: float) -> Platform:
    """``platform`` with every relative device memory turned into bytes: ``memory_fraction x weight_bytes``
    (rounded down); a platform without relative memory is returned as it is.

    Args:
        platform: The platform.
        weight_bytes: The model's weight bytes (the sum of its groups' ``param_bytes``).

    Raises:
        ConfigError: If ``weight_bytes`` is not a positive finite number.
    """
    if not any(d.memory_fraction is not None for d in platform.devices):
        return platform
    if isinstance(weight_bytes, bool) or not (isinstance(weight_bytes, Real) and 0 < weight_bytes < math.inf):
        raise ConfigError(
            f"platform {platform.name!r} sizes memory by the model's weights, which must be > 0 bytes, "
            f"got {weight_bytes!r} (a model without weights cannot be placed on it)"
        )
    devices = tuple(
        d
        if d.memory_fraction is None
        else dataclasses.replace(d, memory_bytes=int(d.memory_fraction * weight_bytes))
        for d in platform.devices
    )
    return dataclasses.replace(platform, devices=devices)


def platform_names() -> list[str]:
    """Names of all platforms: the YAML files here plus ``local``."""
    return sorted({p.stem for p in _DIR.glob("*.yaml")} | {"local"})


def load_platform(name: str | os.PathLike) -> Platform:
    """The platform called ``name``, or the platform file at a path.

    A name is only a name: it may not contain a path separator and must be one of
    :func:`platform_names`. A file of your own is passed as a :class:`~pathlib.Path` or as a string
    ending in ``.yaml``/``.yml``.

    Raises:
        UnknownNameError: If there is no platform of that name (lists the known ones).
        ConfigError: For a missing, unreadable or invalid platform file, or an argument of another type.
    """
    if isinstance(name, os.PathLike) or (isinstance(name, str) and name.endswith(_SUFFIXES)):
        return _load_file(Path(name))
    if not isinstance(name, str):
        raise ConfigError(
            f"a platform is a name or a path to a .yaml file, got {type(name).__name__} {name!r}"
        )
    if name == "local":
        from placement_gym.platforms.local import local_platform

        return local_platform()
    if name not in platform_names():
        raise UnknownNameError("platform", name, platform_names())
    return _load_file(_DIR / f"{name}.yaml")


def _load_file(path: Path) -> Platform:
    if path.suffix not in _SUFFIXES:
        raise ConfigError(f"platform file {path} must end in .yaml or .yml")
    data = load_yaml(path, "platform file")
    return platform_from_dict(data, source=f"platform file {path}")
