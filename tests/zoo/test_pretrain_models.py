"""The pretraining-only model families (MobileNet-V2, EfficientNet-B0, GPT-2): recipes kept out of the suite."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import placement_gym
from placement_gym.benchmarks import load_benchmark
from placement_gym.coarsening import check_contract
from placement_gym.protocol import check_trainable
from placement_gym.zoo import BENCHMARK_MODELS, HELD_OUT_MODELS, MODELS, PRETRAIN_MODELS

#: Published parameter counts: MobileNet-V2 (Sandler et al., CVPR 2018) and EfficientNet-B0 (Tan and Le,
#: ICML 2019) with a 1000-class head, GPT-2 small (Radford et al., 2019) without its LM head.
PARAMETERS = {"mobilenet_v2": 3_504_872, "efficientnet_b0": 5_288_548, "gpt2": 124_439_808}


def test_pretrain_models_are_zoo_models_outside_the_benchmark_and_the_held_out_families() -> None:
    assert set(PRETRAIN_MODELS) == set(PARAMETERS)
    assert not set(PRETRAIN_MODELS) & (set(BENCHMARK_MODELS) | set(HELD_OUT_MODELS))
    for model in PRETRAIN_MODELS:
        assert "pretraining only" in MODELS[model].description
        assert not any(f"-{model}-" in env_id for env_id in placement_gym.ENV_IDS)
    check_trainable(PRETRAIN_MODELS)  # the protocol lets learned methods train on them


@pytest.mark.parametrize("model", sorted(PARAMETERS))
def test_pretrain_models_have_the_published_size(model: str) -> None:
    module = MODELS[model].build()
    assert sum(p.numel() for p in module.parameters()) == PARAMETERS[model]


def test_efficientnet_pools_as_transformers_does() -> None:
    """The pooler swapped in for OpenVINO computes what transformers' AvgPool2d(1280, ceil_mode=True) does."""
    features = torch.randn(1, 1280, 7, 7)
    swapped = MODELS["efficientnet_b0"].build().model.efficientnet.pooler
    original = nn.AvgPool2d(1280, ceil_mode=True)
    torch.testing.assert_close(swapped(features), original(features))


def test_efficientnet_b0_converts_to_a_coarse_graph_that_keeps_the_contract() -> None:
    """OpenVINO converts it (with transformers' own pooler its shape inference refuses the model)."""
    coarse = load_benchmark("efficientnet_b0").coarsen("fused")
    check_contract(coarse)  # groups cover the ops, quotient in topological order (so acyclic), bytes kept
    assert coarse.num_groups > 20
