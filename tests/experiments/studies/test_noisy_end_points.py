"""Noisy end points of guided_improvement specs: one ratio per run, reproducible, only guided specs."""

from __future__ import annotations

import pytest

from experiments.studies.noisy_end_points import noisy_ratios, table
from placement_gym.errors import PlacementGymError


def test_noisy_ratios_are_one_per_run_reproducible_and_never_below_the_optimum():
    spec = "guided_improvement:tabu=local,late=5,late_after=0"
    ratios = noisy_ratios("resnet50", "cpu-igpu", spec, budget=40, noise=0.2, runs=3)
    assert len(ratios) == 3 and min(ratios) >= 1.0 - 1e-9
    assert noisy_ratios("resnet50", "cpu-igpu", spec, budget=40, noise=0.2, runs=3) == ratios
    row = {"model": "resnet50", "platform": "cpu-igpu", "method": spec, "ratios": ratios}
    text = table([row], [spec, "guided_improvement"])
    assert text.splitlines()[2].startswith("| resnet50 / cpu-igpu | ") and text.rstrip().endswith("| - |")


def test_only_guided_improvement_specs_have_a_ranker_to_perturb():
    with pytest.raises(PlacementGymError, match="heft"):
        noisy_ratios("resnet50", "cpu-igpu", "heft", budget=10, noise=0.05, runs=1)
