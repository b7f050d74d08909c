"""The robust statistics and the adaptive, drift-corrected timing protocol, on synthetic run times."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from placement_gym.errors import BackendError
from placement_gym.measured.stats import median_ci, order_coverage
from placement_gym.measured.timing import measure, summarize


def test_order_statistic_interval_is_the_textbook_one():
    # n = 10: (x_(2), x_(9)) covers with 1 - 2 * P(B <= 1) = 0.9785; (x_(3), x_(8)) only 0.891
    ci = median_ci(np.arange(1.0, 11.0))
    assert (ci.low, ci.median, ci.high) == (2.0, 5.5, 9.0)
    assert ci.coverage == pytest.approx(1 - 2 * 11 / 1024)
    assert order_coverage(10, 3) < 0.95
    # too few samples for 95%: the widest interval, with its true coverage
    small = median_ci([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (small.low, small.high) == (1.0, 5.0) and small.coverage == pytest.approx(1 - 2 / 32)
    assert median_ci([2.0]).rel_half_width == 0.0


def test_median_interval_covers_the_true_median_of_a_skewed_distribution():
    rng = np.random.default_rng(0)
    true_median = 1.0  # lognormal(0, 0.5)
    hits = [
        (c := median_ci(rng.lognormal(0.0, 0.5, size=15))).low <= true_median <= c.high for _ in range(2000)
    ]
    assert np.mean(hits) >= 0.95 - 0.015  # exact coverage for n = 15 is 0.965


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_median_ci_refuses_bad_samples(bad):
    with pytest.raises(BackendError):
        median_ci(bad)


def test_adaptive_protocol_stops_when_precise_enough():
    runs = itertools.cycle([1.00, 1.01, 0.99])
    timing = measure(lambda: next(runs), warmup=0, repeats=6, max_repeats=50, rel_ci=0.02, time_budget=1e9)
    assert timing.stop == "ci" and timing.samples == 6 and timing.rel_ci <= 0.02
    assert timing.estimate == pytest.approx(1.0)


def test_adaptive_protocol_stops_at_the_cap_when_noise_stays_high():
    rng = np.random.default_rng(1)
    timing = measure(
        lambda: float(rng.uniform(0.5, 1.5)),
        warmup=0,
        repeats=5,
        max_repeats=12,
        rel_ci=0.01,
        time_budget=1e9,
    )
    assert timing.stop == "max_repeats" and timing.samples == 12 and timing.rel_ci > 0.01


def test_fixed_protocol_without_rel_ci():
    timing = measure(lambda: 1.0, warmup=1, repeats=4, max_repeats=50, time_budget=1e9)
    assert timing.samples == 4 and timing.stop == "repeats"


def test_reference_cancels_a_drift_that_scales_the_whole_machine():
    """The machine slows down steadily (x1 -> x2); the candidate always takes 3x the reference."""
    clock = iter(np.linspace(0.0, 1.0, 10_000))
    speed = [1.0]

    def slower(base: float):
        def run() -> float:
            speed[0] *= 1.02
            return base * speed[0]

        return run

    corrected = measure(
        slower(0.3), warmup=0, repeats=20, time_budget=1e9, reference=slower(0.1), reference_level=0.1,
        clock=lambda: next(clock),
    )  # fmt: skip
    speed[0] = 1.0
    raw = measure(slower(0.3), warmup=0, repeats=20, time_budget=1e9)
    assert corrected.estimate == pytest.approx(0.3, rel=0.03)  # ratio x level
    assert raw.estimate > 0.3 * 1.2  # the drift is in the raw median
    assert len(corrected.reference_times) == corrected.samples == 20


def test_reference_needs_a_level_and_paired_times():
    with pytest.raises(BackendError, match="reference_level"):
        measure(lambda: 1.0, warmup=0, repeats=2, time_budget=1, reference=lambda: 1.0)
    with pytest.raises(BackendError, match="pair"):
        summarize([1.0, 2.0], [1.0], reference_level=1.0)


def test_adaptive_protocol_makes_its_minimum_whatever_the_budget():
    now = iter(range(1000))
    runs = itertools.cycle([1.0, 2.0])
    timing = measure(
        lambda: next(runs),
        warmup=0,
        repeats=6,
        max_repeats=20,
        rel_ci=1e-9,
        time_budget=0.5,
        clock=lambda: next(now),
    )
    assert timing.samples == 6 and timing.stop == "time_budget" and timing.ci_coverage >= 0.95
    assert summarize([1.0, 2.0, 3.0]).ci_coverage == pytest.approx(0.75)
