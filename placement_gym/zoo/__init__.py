"""The model zoo: benchmark networks built from configs, converted to OpenVINO IR and cached."""

from placement_gym.zoo.loading import LoadedModel, core, ir_path, load_model, random_inputs
from placement_gym.zoo.models import (
    BENCHMARK_MODELS,
    HELD_OUT_MODELS,
    MODELS,
    PRETRAIN_MODELS,
    ModelSpec,
    get_spec,
)

__all__ = [
    "BENCHMARK_MODELS",
    "HELD_OUT_MODELS",
    "MODELS",
    "PRETRAIN_MODELS",
    "LoadedModel",
    "ModelSpec",
    "core",
    "get_spec",
    "ir_path",
    "load_model",
    "random_inputs",
]
