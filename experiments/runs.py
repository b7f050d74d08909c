"""Replayable result rows and their on-disk store (JSON lines, append-only, resumable).

A row records everything needed to replay and compare a result: the graph (name and version), the
platform, backend and coarsening, the method with its arguments, the seed and budget, the placement
itself, its latency, and the versions of the libraries. Rows are appended one line at a time and
flushed to disk, so an interrupted benchmark loses at most the cell it was running; a rerun skips every
cell whose key is already stored.
"""

from __future__ import annotations

import json
import math
import os
import platform as pyplatform
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from placement_gym.errors import UnknownNameError


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
    name, kwargs = parse_method(spec)
    if name == "single_device" and "device" in kwargs:
        return f"{kwargs['device']}_only"
    return spec


def library_versions() -> dict[str, str]:
    """Versions of the libraries a result depends on."""
    import gymnasium
    import openvino
    import stable_baselines3
    import torch

    import placement_gym

    return {
        "placement_gym": placement_gym.__version__,
        "openvino": openvino.__version__,
        "torch": torch.__version__,
        "gymnasium": gymnasium.__version__,
        "stable_baselines3": stable_baselines3.__version__,
        "python": pyplatform.python_version(),
    }


@dataclass
class ResultRow:
    """One (model, method, seed) result of a benchmark grid."""

    model: str
    graph_version: int
    platform: str
    backend: str
    coarsening: str
    groups: int
    method: str
    seed: int
    budget: int | None
    latency: float
    cpu_only_latency: float
    speedup_vs_cpu: float
    evaluations: int
    wall_time: float
    placement: list[int]
    history: list[tuple[int, float]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple:
        return (self.model, self.platform, self.backend, self.coarsening, self.method, self.seed, self.budget)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):  # inf latency of an infeasible result, NaN
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


class ResultStore:
    """An append-only JSON-lines file of :class:`ResultRow` s.

    Args:
        path: The ``.jsonl`` file (created with its folder if missing).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def rows(self) -> list[ResultRow]:
        """All complete rows (a torn last line from an interrupted write is ignored)."""
        return list(self._iter())

    def _iter(self) -> Iterator[ResultRow]:
        if not self.path.exists():
            return
        with open(self.path) as f:
            for line in f:
                try:
                    data = json.loads(line)
                except json.JSONDecodeError:
                    continue
                data["history"] = [tuple(h) for h in data.get("history", [])]
                for key in ("latency", "cpu_only_latency", "speedup_vs_cpu"):
                    if data.get(key) is None:
                        data[key] = float("inf") if key != "speedup_vs_cpu" else 0.0
                yield ResultRow(**data)

    def keys(self) -> set[tuple]:
        return {row.key for row in self._iter()}

    def append(self, row: ResultRow) -> None:
        """Append one row durably (flushed and fsynced)."""
        line = json.dumps(_jsonable(asdict(row)), allow_nan=False) + "\n"
        with open(self.path, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
