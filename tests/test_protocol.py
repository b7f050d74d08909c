"""Protocol v1: tiers, seeds, the train and held-out splits (all with stored optima), no training on
held-out families."""

from __future__ import annotations

import pytest

from experiments import cli
from placement_gym import protocol
from placement_gym.errors import ConfigError, UnknownNameError
from placement_gym.tasks import reference_optima


def test_the_protocol_is_what_the_docs_say():
    assert protocol.VERSION == "v1" and protocol.TIERS == {"tiny": 100, "standard": 500, "large": 5000}
    assert protocol.SEEDS == (0, 1, 2, 3, 4)
    train = protocol.resolve_tasks(["train"])
    assert len(train) == 12 and {t.model for t in train} == {"inception_v3", "resnet50", "bert"}
    held = protocol.resolve_tasks(["held-out"])
    assert {t.model for t in held} == {"vit_b16", "convnext_t"} and not {t.model for t in held} & {
        t.model for t in train
    }
    refs = reference_optima()
    for task in train + held:  # every task has a proven optimum to score against, with headroom
        ref = refs[f"{task.model}/v1/{task.platform}/fused"]
        assert ref.latency < ref.baseline_latency


def test_task_selection_keeps_order_and_drops_repeats():
    chosen = protocol.resolve_tasks(["bert/cpu-igpu", "train", "bert/cpu-igpu"])
    assert chosen[0].name == "bert/cpu-igpu" and len(chosen) == 12
    with pytest.raises(UnknownNameError, match="held-out"):
        protocol.resolve_tasks(["heldout"])
    with pytest.raises(UnknownNameError, match="standard"):
        protocol.tier_budget("standart")


def test_held_out_families_are_never_trained_on():
    protocol.check_trainable(["tiny_cnn", "bert"])
    with pytest.raises(ConfigError, match="vit_b16 is a held-out model family"):
        protocol.check_trainable("vit_b16")
    assert cli.main(["train", "--env", "DevicePlacement-vit_b16-cpu_igpu-sim-v0", "--agent", "ppo_gnn"]) == 2
    from experiments.pretraining import guided_improvement

    with pytest.raises(ConfigError, match="convnext_t"):
        guided_improvement.main(["--models", "tiny_cnn", "convnext_t"])
