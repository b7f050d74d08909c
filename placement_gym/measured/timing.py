"""The timing protocol of measured latencies (after CompilerGym's runtime reward, made adaptive).

``warmup`` untimed runs, then timed runs until the estimate is precise enough:

* the estimate is the median run time, its uncertainty the 95% order-statistic confidence interval of the
  median (:mod:`placement_gym.measured.stats`); the spread reported beside it is the interquartile range;
* with ``rel_ci`` set, ``repeats`` runs are always made, and runs continue until the interval's
  half-width is within ``rel_ci`` of the estimate, or ``max_repeats`` runs, or the ``time_budget``
  (whichever comes first); without it, exactly ``repeats`` runs are made (fewer if the time budget runs
  out). With fewer than 6 runs no order-statistic interval reaches 95%: the interval is then the range of
  the runs and :attr:`Timing.ci_coverage` says what it covers;
* with a ``reference`` (another placement's run), reference and candidate runs are interleaved in pairs,
  alternately in the order reference-candidate and candidate-reference (so a linear drift within the window
  hits both equally), and the estimate is the median of the per-pair ratios ``candidate / reference`` times
  ``reference_level``, a fixed latency of the reference measured once. Drift that slows the whole machine
  by a factor (another process, frequency scaling) cancels in the ratio.

At least one timed run is always made; why the runs stopped is recorded (:attr:`Timing.stop`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from placement_gym.errors import BackendError
from placement_gym.measured.stats import median_ci

#: Confidence level of :attr:`Timing.ci_low` / :attr:`Timing.ci_high`.
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Timing:
    """Summary of the timed runs of one evaluation.

    Attributes:
        median: Median wall time of the candidate's own runs, seconds (not drift-corrected).
        iqr: Interquartile range of the run times, seconds (0 for fewer than two samples).
        samples: Number of timed runs of the candidate.
        times: Every timed run, seconds, in order, shape ``(samples,)``.
        estimate: The latency estimate, seconds: ``median``, or with a reference the median ratio times
            ``reference_level``.
        ci_low: Lower end of the 95% confidence interval of ``estimate``, seconds.
        ci_high: Upper end of it, seconds.
        reference_times: The interleaved reference runs, seconds, shape ``(samples,)`` (empty without one).
        reference_level: The fixed reference latency ratios are scaled by (None without a reference).
        stop: Why timing stopped: ``"ci"`` (precise enough), ``"repeats"`` (fixed count reached),
            ``"max_repeats"`` or ``"time_budget"``.
    """

    median: float
    iqr: float
    samples: int
    times: tuple[float, ...]
    estimate: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    reference_times: tuple[float, ...] = ()
    reference_level: float | None = None
    stop: str = "repeats"

    @property
    def finite(self) -> bool:
        """Whether every timed run gave a finite, non-negative time (reference runs too)."""
        return all(math.isfinite(t) and t >= 0 for t in self.times + self.reference_times)

    @property
    def ci_half_width(self) -> float:
        """The larger distance from the estimate to an end of its confidence interval, seconds."""
        return max(self.estimate - self.ci_low, self.ci_high - self.estimate)

    @property
    def ci_coverage(self) -> float:
        """Probability that ``(ci_low, ci_high)`` covers the true median (>= 0.95 from 6 runs on)."""
        return median_ci(np.ones(self.samples)).coverage

    @property
    def rel_ci(self) -> float:
        """:attr:`ci_half_width` relative to the estimate (``inf`` for a zero estimate)."""
        return self.ci_half_width / self.estimate if self.estimate > 0 else math.inf


def summarize(
    times: list[float] | np.ndarray,
    reference_times: list[float] | np.ndarray = (),
    reference_level: float | None = None,
    stop: str = "repeats",
) -> Timing:
    """The :class:`Timing` of run times (seconds), shape ``(k,)`` with ``k >= 1``, and, with a reference,
    the interleaved reference times of the same shape and the reference level (seconds).

    Raises:
        BackendError: For no run times, or reference times that do not pair with the run times.
    """
    arr = np.asarray(times, dtype=np.float64)
    ref = np.asarray(reference_times, dtype=np.float64)
    if arr.size == 0:
        raise BackendError("summarize needs at least one run time")
    if ref.size and (ref.shape != arr.shape or reference_level is None):
        raise BackendError(
            f"reference times must pair with the run times ({arr.size}) and come with a reference level, "
            f"got {ref.size} times and level {reference_level!r}"
        )
    q1, med, q3 = np.percentile(arr, [25, 50, 75]) if arr.size > 1 else (arr[0], arr[0], arr[0])
    estimate = low = high = math.nan
    if np.all(np.isfinite(arr)) and np.all(np.isfinite(ref)) and (not ref.size or np.all(ref > 0)):
        scale = float(reference_level) if ref.size else 1.0
        ci = median_ci(arr / ref if ref.size else arr, CONFIDENCE)
        estimate, low, high = ci.median * scale, ci.low * scale, ci.high * scale
    return Timing(
        median=float(med),
        iqr=float(q3 - q1),
        samples=int(arr.size),
        times=tuple(arr.tolist()),
        estimate=estimate,
        ci_low=low,
        ci_high=high,
        reference_times=tuple(ref.tolist()),
        reference_level=float(reference_level) if ref.size else None,
        stop=stop,
    )


def measure(
    run: Callable[[], float],
    *,
    warmup: int,
    repeats: int,
    time_budget: float,
    max_repeats: int | None = None,
    rel_ci: float | None = None,
    reference: Callable[[], float] | None = None,
    reference_level: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Time ``run`` following the protocol (see the module docstring).

    Args:
        run: Runs one inference and returns its own wall time in seconds (so the caller's bookkeeping
            between runs is not counted).
        warmup: Untimed runs first (all of them, whatever the budget; the reference's too).
        repeats: Timed runs: the fixed count without ``rel_ci``, the minimum with it (made whatever the
            budget). ``>= 1``.
        time_budget: Seconds, counted from the first warm-up run, after which no further timed run starts.
        max_repeats: Cap on timed runs with ``rel_ci`` (default ``repeats``).
        rel_ci: Stop once the 95% confidence interval's half-width is within this fraction of the estimate.
        reference: Runs the reference placement once and returns its wall time (interleaved with ``run``).
        reference_level: Latency of the reference in seconds; required with ``reference``.
        clock: Time source for the budget.

    Raises:
        BackendError: For a ``reference`` without a positive ``reference_level``.
    """
    if reference is not None and not (reference_level is not None and reference_level > 0):
        raise BackendError(f"a reference needs a positive reference_level, got {reference_level!r}")
    cap = max(repeats, max_repeats or repeats) if rel_ci is not None else repeats
    start = clock()
    for _ in range(warmup):
        run()
        if reference is not None:
            reference()
    times: list[float] = []
    ref: list[float] = []
    while True:
        if reference is None:
            times.append(run())
        elif len(times) % 2 == 0:
            ref.append(reference())
            times.append(run())
        else:
            times.append(run())
            ref.append(reference())
        n = len(times)
        if n >= cap:
            stop = "max_repeats" if rel_ci is not None else "repeats"
            break
        if rel_ci is not None and n >= repeats:
            timing = summarize(times, ref, reference_level)
            if timing.rel_ci <= rel_ci:
                return dataclasses.replace(timing, stop="ci")
        if clock() - start >= time_budget and (rel_ci is None or n >= repeats):
            stop = "time_budget"
            break
    return summarize(times, ref, reference_level, stop)
