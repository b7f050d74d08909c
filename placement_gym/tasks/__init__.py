"""Benchmark tasks: their reference optima (data) and the normalised score.

A task is a (model, graph version, platform, coarsening level) on the simulated backend. Its reference
optimum is the best placement the exact solver (:mod:`agents.baselines.exact`) found, with a proven lower
bound of every placement's latency; both are stored in ``optima.json`` next to this file and regenerated
by ``python -m experiments.records.reference_optima``. A placement's latency is always the simulator's.

A task is identified by its content, :func:`task_sha256`: the model (name, graph version, and for a model
file its hash), the coarsening level, the group count and every figure of the platform (devices in order,
links, host), but not the platform's name. A result that records the hash of its task is scored only
against the optimum of the same hash (:func:`reference_for`): a platform file that keeps a built-in
name but changes a figure has no reference optimum (no score), and a renamed copy of a built-in platform
has the built-in's.

The normalised score of a latency is the share of the available headroom it captures, as D4RL normalises
returns (Fu et al., "D4RL: Datasets for Deep Data-Driven Reinforcement Learning", 2020)::

    score = (baseline / latency - 1) / (baseline / optimum - 1)

0 is the baseline (the best single device, or where no single device can hold the model the best of
Baechi's memory-aware list schedulers m-TOPO, m-ETF and m-SCT, stored with its placement), 1 the reference
optimum.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from placement_gym import sealing
from placement_gym.errors import PlacementGymError, UnknownNameError
from placement_gym.platforms import Platform

OPTIMA_PATH = Path(__file__).with_name("optima.json")


@dataclass(frozen=True)
class ReferenceOptimum:
    """The reference optimum of one task.

    Attributes:
        model: Benchmark model name.
        version: Its graph version.
        platform: Platform name.
        level: Coarsening level (``fused``...).
        latency: Simulated latency of :attr:`placement`, seconds (the best known).
        lower_bound: Proven lower bound of every placement's simulated latency, seconds.
        placement: Device index of each group.
        baseline: What the score's 0 is (``"single device <name>"`` or a method name).
        baseline_latency: Its latency, seconds.
        heft_latency: HEFT's latency, seconds.
        solver: The solver and its settings.
        solve_time: Seconds the solver ran, with the machine's load (``uptime``) when it ran.
        baseline_placement: Where no single device can hold the model, the baseline's placement (the best
            of Baechi's memory-aware list schedulers); ``None`` for a single-device baseline.
        task_sha256: The task's content hash (:func:`task_sha256`).
    """

    model: str
    version: int
    platform: str
    level: str
    latency: float
    lower_bound: float
    placement: tuple[int, ...]
    baseline: str
    baseline_latency: float
    heft_latency: float
    solver: dict[str, Any]
    solve_time: dict[str, Any]
    baseline_placement: tuple[int, ...] | None = None
    task_sha256: str | None = None

    @property
    def gap(self) -> float:
        """Relative gap between the latency and the lower bound (0: proven optimal)."""
        return max(0.0, (self.latency - self.lower_bound) / self.latency)

    @property
    def headroom(self) -> float:
        """Baseline latency over the optimum (how much placement matters)."""
        return self.baseline_latency / self.latency

    def score(self, latency: float) -> float:
        """:func:`normalised_score` of ``latency`` on this task."""
        return normalised_score(latency, self.baseline_latency, self.latency)


def normalised_score(latency: float, baseline: float, optimum: float) -> float:
    """``(baseline / latency - 1) / (baseline / optimum - 1)``: 0 at the baseline, 1 at the optimum.

    An infeasible placement (``latency = inf``) scores ``-1 / (baseline / optimum - 1)``.

    Raises:
        PlacementGymError: If a latency is not positive, or the optimum is not faster than the baseline
            (no headroom: the score is undefined).
    """
    if not (latency > 0 and baseline > 0 and optimum > 0) or math.isnan(latency):
        raise PlacementGymError(
            f"latencies must be > 0, got latency={latency!r}, baseline={baseline!r}, optimum={optimum!r}"
        )
    if not optimum < baseline:
        raise PlacementGymError(
            f"the optimum ({optimum!r} s) is not faster than the baseline ({baseline!r} s): no headroom, "
            "so the normalised score is undefined; report the speedup instead"
        )
    return (baseline / latency - 1.0) / (baseline / optimum - 1.0)


def task_sha256(
    model: str, version: int, level: str, groups: int, platform: Platform, model_sha256: str | None = None
) -> str:
    """The SHA-256 of a task's content (see the module docstring), hex.

    Args:
        model: Model name.
        version: Its graph version.
        level: Coarsening level as recorded (``"fused"``, ``"fused+k64"``...).
        groups: Number of groups of the coarse graph.
        platform: The platform as the problem uses it (device memory resolved for the model).
        model_sha256: For a model file, its hash (``Benchmark.source_sha256``).
    """
    devices = [{k: v for k, v in dataclasses.asdict(d).items() if k != "name"} for d in platform.devices]
    links = [
        [i, j, link.latency, link.bandwidth, link.blocked_bandwidth]
        for (i, j), link in sorted(platform.links.items())
    ]
    content = {
        "model": model,
        "version": int(version),
        "model_sha256": model_sha256,
        "level": level,
        "groups": int(groups),
        "devices": devices,
        "links": links,
        "host": platform.host,
    }
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _key(model: str, version: int, platform: str, level: str) -> str:
    return f"{model}/v{version}/{platform}/{level}"


def reference_optima() -> Mapping[str, ReferenceOptimum]:
    """Every stored reference optimum, keyed ``"model/v<version>/platform/level"`` (read-only).

    Raises:
        ProtocolAccessError: While an agent runs under the benchmark protocol (:mod:`placement_gym.sealing`).
    """
    sealing.refuse_optima()
    return _stored_optima()


@lru_cache(maxsize=1)
def _stored_optima() -> Mapping[str, ReferenceOptimum]:
    """The stored optima, parsed once, shared read-only (a mapping proxy of frozen records)."""
    return MappingProxyType(load_optima())


def load_optima() -> dict[str, ReferenceOptimum]:
    """Parse ``optima.json`` afresh: a private copy no other code shares (the protocol scores with it)."""
    if not OPTIMA_PATH.is_file():
        return {}
    rows = json.loads(OPTIMA_PATH.read_text())["tasks"]
    out = {}
    for row in rows:
        row = dict(row, placement=tuple(row["placement"]))
        if row.get("baseline_placement") is not None:
            row["baseline_placement"] = tuple(row["baseline_placement"])
        ref = ReferenceOptimum(**row)
        out[_key(ref.model, ref.version, ref.platform, ref.level)] = ref
    return out


@lru_cache(maxsize=1)
def _by_task() -> Mapping[str, ReferenceOptimum]:
    return MappingProxyType({ref.task_sha256: ref for ref in _stored_optima().values() if ref.task_sha256})


def reference_for(
    model: str, version: int, platform: str, level: str, groups: int, task_sha256: str | None = None
) -> ReferenceOptimum | None:
    """The reference optimum of a result's task, or ``None`` if there is none.

    With ``task_sha256`` (every result written since results record it) the optimum of that content
    hash, whatever the names; without it (an older result), the optimum stored under the names, if it
    has ``groups`` groups.

    Raises:
        ProtocolAccessError: While an agent runs under the benchmark protocol.
    """
    sealing.refuse_optima()
    return stored_reference(model, version, platform, level, groups, task_sha256)


def stored_reference(
    model: str, version: int, platform: str, level: str, groups: int, task_sha256: str | None = None
) -> ReferenceOptimum | None:
    """:func:`reference_for` without the seal's check: for the problem's own baseline and the protocol's
    scoring, never handed to an agent."""
    if task_sha256 is not None:
        return _by_task().get(task_sha256)
    ref = _stored_optima().get(_key(model, version, platform, level))
    return ref if ref is not None and len(ref.placement) == groups else None


def fresh_score(task_sha256: str, latency: float) -> float:
    """The normalised score of ``latency`` on the task of ``task_sha256`` against a freshly parsed copy of
    the stored optima (so no object another piece of code could have changed), ``nan`` without one or
    without headroom."""
    ref = next((r for r in load_optima().values() if r.task_sha256 == task_sha256), None)
    if ref is None or not ref.latency < ref.baseline_latency or not latency > 0:
        return math.nan
    return ref.score(latency)


def reference_optimum(model: str, version: int, platform: str, level: str = "fused") -> ReferenceOptimum:
    """The stored reference optimum of one task.

    Raises:
        UnknownNameError: If no optimum is stored for it (lists the tasks that have one).
        ProtocolAccessError: While an agent runs under the benchmark protocol.
    """
    table = reference_optima()
    key = _key(model, version, platform, level)
    if key not in table:
        raise UnknownNameError("task with a reference optimum", key, table)
    return table[key]


__all__ = [
    "OPTIMA_PATH", "ReferenceOptimum", "fresh_score", "load_optima", "normalised_score", "reference_for", "reference_optima",
    "reference_optimum", "stored_reference",
    "task_sha256",
]  # fmt: skip
