"""The held-out families have reference optima on the suite platforms (re-evaluated in test_tasks.py)."""

from __future__ import annotations

import placement_gym
from experiments.records.reference_optima import tasks
from placement_gym.tasks import reference_optimum


def test_held_out_models_have_optima_on_the_suite_platforms() -> None:
    from placement_gym.transfer import EXCLUDED  # held-out tasks without a stored optimum or bound

    for model in placement_gym.HELD_OUT_MODELS:
        for platform in placement_gym.HELD_OUT_PLATFORMS:
            if (model, platform) in EXCLUDED:
                continue
            ref = reference_optimum(model, 1, platform)
            assert ref.level == "fused" and ref.latency <= ref.heft_latency


def test_reference_optima_solves_held_out_models_on_the_suite_platforms_only() -> None:
    pairs = tasks(["bert", "vit_b16"], ["cpu-dgpu", "cpu-igpu"])
    assert pairs == [("bert", "cpu-dgpu"), ("bert", "cpu-igpu"), ("vit_b16", "cpu-igpu")]


def test_reference_optima_solves_a_mask_binding_platform_for_its_own_tasks_only() -> None:
    pairs = tasks(["resnet50", "whisper_tiny"], ["cpu-igpu-lowmem", "cpu-igpu-carveout"])
    assert pairs == [("resnet50", "cpu-igpu-lowmem"), ("whisper_tiny", "cpu-igpu-carveout")]
