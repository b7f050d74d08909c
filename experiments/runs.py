"""Method specs of the experiment scripts, and the result rows they write.

The row format and its store live in :mod:`placement_gym.results` (re-exported here for the scripts):
one :class:`ResultRow` per cell, appended under a lock, resumable, safe with two writers.
"""

from __future__ import annotations

import json
from typing import Any

from agents.plugins import parse_spec
from placement_gym.errors import UnknownNameError
from placement_gym.results import (
    CHECKPOINTS,
    ResultRow,
    ResultStore,
    RowSchema,
    library_versions,
    parse_row,
    reject_bool,
    thin_history,
)

__all__ = [
    "CHECKPOINTS",
    "ResultRow",
    "ResultStore",
    "RowSchema",
    "library_versions",
    "method_label",
    "parse_method",
    "parse_row",
    "reject_bool",
    "thin_history",
]


def parse_method(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``"name:key=value,key=value"`` into the method name and its keyword arguments.

    Values are parsed as JSON when possible (numbers, booleans), else kept as strings.
    """
    name, _, args = spec.partition(":")
    kwargs: dict[str, Any] = {}
    for item in filter(None, args.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise UnknownNameError("method argument (expected key=value)", item, [])
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    return name, kwargs


def method_label(spec: str) -> str:
    """Short label of a method spec for tables (``single_device:device=cpu`` -> ``cpu_only``)."""
    parsed = parse_spec(spec)
    if parsed.target == "single_device" and "device" in parsed.kwargs:
        return f"{parsed.kwargs['device']}_only"
    return spec


