"""Robust statistics of run times: the median with a distribution-free confidence interval.

Run times on a shared machine are skewed (a run interrupted by another process is slow, never fast) and
not normal, so the estimate is the median and its 95% confidence interval comes from order statistics:
the number of samples below the true median is ``Binomial(n, 1/2)``, so ``(x_(j), x_(n+1-j))`` covers it
with probability ``P(j <= B <= n - j)`` whatever the distribution (Conover, *Practical Nonparametric
Statistics*, 3rd ed., sec. 3.2). With fewer than 6 samples no such interval reaches 95%; the widest one,
``(min, max)``, is returned and :func:`median_ci` says how much it covers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from placement_gym.errors import BackendError


@dataclass(frozen=True)
class MedianCI:
    """A median with its order-statistic confidence interval.

    Attributes:
        median: The sample median.
        low: Lower end of the interval.
        high: Upper end of the interval.
        coverage: Probability that the interval covers the true median (>= the confidence asked for,
            unless there were too few samples).
    """

    median: float
    low: float
    high: float
    coverage: float

    @property
    def rel_half_width(self) -> float:
        """The larger distance from the median to an end of the interval, relative to the median
        (``inf`` for a median of 0)."""
        if self.median <= 0:
            return float("inf")
        return max(self.median - self.low, self.high - self.median) / self.median


def order_coverage(n: int, j: int) -> float:
    """Probability that ``(x_(j), x_(n+1-j))`` (1-based order statistics of ``n`` samples) covers the median."""
    return _half_cdf(n - j, n) - _half_cdf(j - 1, n)


def _half_cdf(k: int, n: int) -> float:
    """``P(B <= k)`` for ``B ~ Binomial(n, 1/2)``, exact in integers (scipy.stats takes seconds to import)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(min(k, n) + 1)) / 2**n


def median_ci(values: np.ndarray | list[float], confidence: float = 0.95) -> MedianCI:
    """Median of ``values`` (shape ``(n,)``, ``n >= 1``) and the narrowest symmetric order-statistic interval
    that covers the true median with probability ``>= confidence`` (``(min, max)`` if none does).

    Raises:
        BackendError: For no values, non-finite values or a confidence outside (0, 1).
    """
    x = np.sort(np.asarray(values, dtype=np.float64))
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise BackendError(f"median_ci needs finite values, got {x.tolist()}")
    if not 0.0 < confidence < 1.0:
        raise BackendError(f"confidence must be in (0, 1), got {confidence!r}")
    n = int(x.size)
    j = 1
    while j + 1 <= n // 2 and order_coverage(n, j + 1) >= confidence:
        j += 1
    coverage = order_coverage(n, j) if n > 1 else 0.0
    return MedianCI(float(np.median(x)), float(x[j - 1]), float(x[n - j]), coverage)
