"""The timing protocol of measured latencies (after CompilerGym's runtime reward).

``warmup`` untimed runs, then up to ``repeats`` timed runs; the estimate is the median and the spread
the interquartile range. Repeating stops early once the evaluation has used its time budget, but at
least one timed run is always made; the number of timed runs is reported as ``samples``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from placement_gym.errors import BackendError


@dataclass(frozen=True)
class Timing:
    """Summary of the timed runs of one evaluation.

    Attributes:
        median: Median wall time of one run, seconds.
        iqr: Interquartile range of the run times, seconds (0 for fewer than two samples).
        samples: Number of timed runs.
        times: Every timed run, seconds, in order, shape ``(samples,)``.
    """

    median: float
    iqr: float
    samples: int
    times: tuple[float, ...]

    @property
    def finite(self) -> bool:
        """Whether every timed run gave a finite, non-negative time."""
        return all(math.isfinite(t) and t >= 0 for t in self.times)


def summarize(times: list[float] | np.ndarray) -> Timing:
    """Median and interquartile range of run times (seconds), shape ``(k,)`` with ``k >= 1``."""
    arr = np.asarray(times, dtype=np.float64)
    if arr.size == 0:
        raise BackendError("summarize needs at least one run time")
    q1, med, q3 = np.percentile(arr, [25, 50, 75]) if arr.size > 1 else (arr[0], arr[0], arr[0])
    return Timing(float(med), float(q3 - q1), int(arr.size), tuple(arr.tolist()))


def measure(
    run: Callable[[], float],
    *,
    warmup: int,
    repeats: int,
    time_budget: float,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Time ``run`` following the protocol.

    Args:
        run: Runs one inference and returns its own wall time in seconds (so the caller's bookkeeping
            between runs is not counted).
        warmup: Untimed runs first (all of them, whatever the budget).
        repeats: Maximum number of timed runs, ``>= 1``.
        time_budget: Seconds, counted from the first warm-up run, after which no further timed run
            starts.
        clock: Time source for the budget.

    Returns:
        The median, IQR and number of timed runs.
    """
    start = clock()
    for _ in range(warmup):
        run()
    times = [run()]
    while len(times) < repeats and clock() - start < time_budget:
        times.append(run())
    return summarize(times)
