"""Placements measured in interleaved rounds against the all-on-host reference, and their pooled latencies.

Sim-to-real measures a few placements side by side twice (:mod:`experiments.fidelity.sim_to_real`): to pick
the fine-tuned placement among the fine-tune's best candidates, then to compare the answers. Both use the
measured backend's drift correction (``reference="host"``: every timed run of a placement is paired with a
run of the all-on-host placement) without a result cache, so each round is a fresh measurement; both pool
a placement's per-pair ratios over all its rounds into one latency with a 95% interval.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import numpy as np

from placement_gym.problem import PlacementProblem


def protocol(rel_ci: float, time_budget: float) -> dict[str, Any]:
    """Measured-backend settings of a round: drift-corrected against the host, no result cache."""
    return {"reference": "host", "cache_size": 0, "rel_ci": rel_ci, "time_budget": time_budget}


def open_backend(model: str, settings: dict[str, Any]) -> Any:
    """A measured backend of ``model`` on the ``local`` platform with ``settings``."""
    return PlacementProblem.make(model, "local", "measured", backend_kwargs=settings).backend


def rotations(keys: Sequence[Hashable], rounds: int) -> list[tuple[int, Hashable]]:
    """``(round, key)`` in measuring order: round ``r`` takes ``keys`` rotated left by ``r``, so over
    ``len(keys)`` rounds every placement is measured once in every position of a round."""
    k = len(keys)
    return [(r, keys[(r + i) % k]) for r in range(rounds) for i in range(k)]


def measure(
    model: str,
    placements: dict[Hashable, np.ndarray],
    todo: Iterable[tuple[int, Hashable]],
    settings: dict[str, Any],
    row: Callable[[int, Hashable], dict[str, Any]],
    log: Callable[[dict[str, Any]], None],
) -> None:
    """Measure ``placements[key]`` for each ``(round, key)`` of ``todo`` in one backend, logging a row each.

    Args:
        model: Model name.
        placements: The placements by key.
        todo: ``(round, key)`` pairs to measure, in order (nothing is opened if empty).
        settings: Measured-backend settings (:func:`protocol`).
        row: The fields that name a measurement (stage, round, key, ...), given its round and key.
        log: Receives each row as soon as it is measured (its ``wall_s``: the evaluation's seconds,
            compilation and warm-up included).
    """
    todo = list(todo)
    if not todo:
        return
    backend = open_backend(model, settings)
    try:
        for r, key in todo:
            load_before, begin = os.getloadavg()[0], time.perf_counter()
            result = backend.evaluate(placements[key])
            wall = time.perf_counter() - begin
            timing = getattr(backend, "last_timing", None)
            out = {
                **row(r, key),
                "placement": np.asarray(placements[key]).tolist(),
                "feasible": bool(result.feasible),
                "latency_ms": result.latency * 1e3 if result.feasible else None,
                "ci_ms": result.ci * 1e3 if result.feasible and result.ci is not None else None,
                "times": list(timing.times) if timing else [],
                "reference_times": list(timing.reference_times) if timing else [],
                "load": [load_before, os.getloadavg()[0]],
                "wall_s": wall,
                "protocol": settings,
                "reason": result.reason,
            }
            log(out)
            latency = "infeasible" if out["latency_ms"] is None else f"{out['latency_ms']:.2f} ms"
            print(
                f"{model} {out['stage']} round {r} {key!s:10s} {latency} load {out['load'][1]:.2f}",
                flush=True,
            )
    finally:
        backend.close()


def pool(rows: list[dict[str, Any]], field: str, keys: Iterable[Hashable]) -> dict[Hashable, dict[str, Any]]:
    """Per key (the value of ``row[field]``), its rows' pooled drift-corrected latency and 95% interval.

    Latency = the median of the per-pair ratios of all the key's feasible rounds x the median of all
    ``rows``' reference runs (so every key is scaled alike); the interval is that of the median ratio
    (order statistics). Beside it: the raw median of the key's own runs and its interval, the feasible
    rounds, the runs and the load range (milliseconds). Keys without a feasible round are left out.
    """
    from placement_gym.measured.stats import median_ci

    reference = [t for r in rows for t in r["reference_times"]]
    level = float(np.median(reference)) if reference else float("nan")
    out = {}
    for key in keys:
        mine = [r for r in rows if r[field] == key and r["feasible"] and r["times"]]
        if not mine:
            continue
        times = np.array([t for r in mine for t in r["times"]])
        refs = np.array([t for r in mine for t in r["reference_times"]])
        ratio = median_ci(times / refs) if refs.size == times.size else None
        raw = median_ci(times)
        loads = [x for r in mine for x in r["load"]]
        out[key] = {
            "latency_ms": ratio.median * level * 1e3 if ratio else float("nan"),
            "low_ms": ratio.low * level * 1e3 if ratio else float("nan"),
            "high_ms": ratio.high * level * 1e3 if ratio else float("nan"),
            "ratio_to_host": ratio.median if ratio else float("nan"),
            "raw_ms": raw.median * 1e3,
            "raw_low_ms": raw.low * 1e3,
            "raw_high_ms": raw.high * 1e3,
            "rounds": len(mine),
            "runs": int(times.size),
            "load": (min(loads), max(loads)),
            "placement": mine[0]["placement"],
        }
    return out
