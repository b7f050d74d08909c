"""Benchmark tasks: their reference optima (data) and the normalised score.

A task is a (model, graph version, platform, coarsening level) on the simulated backend. Its reference
optimum is the best placement the exact solver (:mod:`agents.baselines.exact`) found, with a proven lower
bound of every placement's latency; both are stored in ``optima.json`` next to this file and regenerated
by ``python -m experiments.reference_optima``. A placement's latency is always the simulator's.

The normalised score of a latency is the share of the available headroom it captures, as D4RL normalises
returns (Fu et al., "D4RL: Datasets for Deep Data-Driven Reinforcement Learning", 2020)::

    score = (baseline / latency - 1) / (baseline / optimum - 1)

0 is the baseline (the best single device, or where no single device can hold the model the best of
Baechi's memory-aware list schedulers m-TOPO, m-ETF and m-SCT, stored with its placement), 1 the reference
optimum.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from placement_gym.errors import PlacementGymError, UnknownNameError

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


def _key(model: str, version: int, platform: str, level: str) -> str:
    return f"{model}/v{version}/{platform}/{level}"


@lru_cache(maxsize=1)
def reference_optima() -> dict[str, ReferenceOptimum]:
    """Every stored reference optimum, keyed ``"model/v<version>/platform/level"``."""
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


def reference_optimum(model: str, version: int, platform: str, level: str = "fused") -> ReferenceOptimum:
    """The stored reference optimum of one task.

    Raises:
        UnknownNameError: If no optimum is stored for it (lists the tasks that have one).
    """
    table = reference_optima()
    key = _key(model, version, platform, level)
    if key not in table:
        raise UnknownNameError("task with a reference optimum", key, table)
    return table[key]


__all__ = ["OPTIMA_PATH", "ReferenceOptimum", "normalised_score", "reference_optima", "reference_optimum"]
