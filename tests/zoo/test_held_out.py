"""The held-out model families (ViT, ConvNeXt, Swin, MobileViT, Whisper): recipes, graphs and registered suite
IDs."""

from __future__ import annotations

from collections import Counter

import gymnasium as gym
import numpy as np
import pytest

import placement_gym
from placement_gym.benchmarks import load_benchmark
from placement_gym.zoo import BENCHMARK_MODELS, HELD_OUT_MODELS, MODELS

#: Published parameter counts with a 1000-class head: ViT-B/16 (Dosovitskiy et al., ICLR 2021) as
#: transformers builds it, ConvNeXt-T (Liu et al., CVPR 2022) as torchvision's ``convnext_tiny``, Swin-T (Liu
#: et al., ICCV 2021; 28.3M) and MobileViT-S (Mehta and Rastegari, ICLR 2022; 5.6M) as transformers builds
#: them, and Whisper-tiny's audio encoder (Radford et al., 2022; 8.2M of the model's 39M).
PARAMETERS = {
    "vit_b16": 86_567_656, "convnext_t": 28_589_128, "swin_t": 28_288_354, "mobilevit_s": 5_578_632,
    "whisper_tiny": 8_208_384,
}  # fmt: skip
#: Fused group counts of the held-out graphs.
GROUPS = {"vit_b16": 186, "convnext_t": 127, "swin_t": 404, "mobilevit_s": 217, "whisper_tiny": 68}


def test_held_out_models_are_zoo_models_kept_apart_from_the_benchmark_ones() -> None:
    assert placement_gym.HELD_OUT_MODELS == HELD_OUT_MODELS
    assert HELD_OUT_MODELS == ("vit_b16", "convnext_t", "swin_t", "mobilevit_s", "whisper_tiny")
    assert not set(HELD_OUT_MODELS) & set(BENCHMARK_MODELS)
    for model in HELD_OUT_MODELS:
        assert MODELS[model].version == 1 and "held out" in MODELS[model].description


def test_held_out_models_have_the_suite_ids_only() -> None:
    for model in HELD_OUT_MODELS:
        for platform in placement_gym.HELD_OUT_PLATFORMS:
            spec = gym.spec(placement_gym.suite_id(model, platform))
            assert spec.kwargs == {"model": model, "platform": platform, "backend": "simulated"}
            assert not spec.nondeterministic
        assert not any(f"-{model}-" in i for i in placement_gym.ENV_IDS if "-sim-" not in i)
    assert "DevicePlacement-vit_b16-multi_accel-sim-v0" in placement_gym.ENV_IDS
    assert "DevicePlacement-vit_b16-model_parallel-sim-v0" not in placement_gym.ENV_IDS


def _op_counts(model: str) -> Counter:
    return Counter(load_benchmark(model).ops.op_types)


def test_tiny_vit_graph_is_a_transformer_with_fused_attention() -> None:
    bench = load_benchmark("tiny_vit")
    counts = Counter(bench.ops.op_types)
    # 2 layers; OpenVINO fuses each eager softmax(QK^T)V into one ScaledDotProductAttention op
    assert counts["ScaledDotProductAttention"] == 2 and counts["Gelu"] == 2 and counts["Convolution"] == 1
    sdpa = [i for i, t in enumerate(bench.ops.op_types) if t == "ScaledDotProductAttention"]
    # 2 heads x 17 tokens (16 patches + CLS) x 17 keys x (2*16 + 2*16 + 5) FLOPs, not one per output element
    assert bench.ops.nodes["flops"][sdpa[0]] == pytest.approx(2 * 17 * 17 * (2 * 16 + 2 * 16 + 5))
    fused = bench.coarsen("fused")
    assert 1 < fused.num_groups < bench.ops.num_nodes


def test_tiny_convnext_graph_has_depthwise_blocks() -> None:
    counts = _op_counts("tiny_convnext")
    # stem + 3 downsampling convolutions; one depthwise 7x7 (GroupConvolution) per block (1+1+2+1)
    assert counts["Convolution"] == 4 and counts["GroupConvolution"] == 5 and counts["Gelu"] == 5


def test_suite_id_of_a_held_out_model_runs_on_its_tiny_variant() -> None:
    env = gym.make(placement_gym.suite_id("vit_b16", "multi-accel"), model="tiny_vit").unwrapped
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(np.zeros(env.action_space.shape, dtype=np.int64))
    assert terminated and np.isfinite(reward) and info["latency"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("model", HELD_OUT_MODELS)
def test_full_size_held_out_models(model: str) -> None:
    """Builds (cold: 20-35 s each on 2 shared cores) and checks size and fused graph."""
    module = MODELS[model].build()
    assert sum(p.numel() for p in module.parameters()) == PARAMETERS[model]
    bench = load_benchmark(model)
    assert bench.coarsen("fused").num_groups == GROUPS[model]
