"""The headroom sweep reproduces the stored model-parallel task at the platform's own fractions."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.studies.headroom_sweep import markdown, relaxed_optimum, sweep_setting
from placement_gym.problem import PlacementProblem
from placement_gym.tasks import reference_optimum


def test_sweep_matches_the_stored_task_at_the_platform_fractions() -> None:
    problem = PlacementProblem.make("resnet50", "model-parallel", "simulated", reward="neg_latency_ms")
    relaxed = relaxed_optimum(problem, segment_time_limit=60.0)
    row = sweep_setting("resnet50", 0.8, 0.55, relaxed)  # model-parallel.yaml's fractions
    stored = reference_optimum("resnet50", int(problem.benchmark.version), "model-parallel")
    assert row["every_single_device_infeasible"]
    assert row["baseline_ms"] == pytest.approx(stored.baseline_latency * 1e3, rel=1e-9)
    assert row["relaxed_optimum_fits"]  # so the relaxed optimum is the task's optimum
    assert row["relaxed_optimum_ms"] == pytest.approx(stored.latency * 1e3, rel=1e-9)
    assert row["headroom_low"] == pytest.approx(stored.headroom, rel=1e-9)


def test_tighter_memory_is_reported_as_out_of_memory() -> None:
    problem = PlacementProblem.make("resnet50", "model-parallel", "simulated", reward="neg_latency_ms")
    relaxed = relaxed_optimum(problem, segment_time_limit=60.0)
    row = sweep_setting("resnet50", 0.5, 0.35, relaxed)
    assert all(v is None for v in row["list_schedulers_ms"].values())
    assert not row["relaxed_optimum_fits"] and np.isnan(row["headroom_high"])
    assert "| resnet50 | 0.5 | 0.35 | yes | OOM / OOM / OOM |" in markdown([row], [])
