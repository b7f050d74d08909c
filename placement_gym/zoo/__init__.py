"""The model zoo: benchmark networks built from configs, converted to OpenVINO IR and cached."""

from placement_gym.zoo.cache import CACHE_ENV_VAR, cache_root
from placement_gym.zoo.loading import LoadedModel, core, ir_path, load_model, random_inputs
from placement_gym.zoo.models import BENCHMARK_MODELS, MODELS, ModelSpec, get_spec

__all__ = [
    "BENCHMARK_MODELS",
    "CACHE_ENV_VAR",
    "MODELS",
    "LoadedModel",
    "ModelSpec",
    "cache_root",
    "core",
    "get_spec",
    "ir_path",
    "load_model",
    "random_inputs",
]
