"""Turn any model source into an ``openvino.Model``: a zoo name, an IR or ONNX path, or a torch module.

Zoo models are converted once and cached as IR (see :mod:`placement_gym.cache`), keyed by model
name, recipe version and OpenVINO version.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from placement_gym.cache import cached_entry
from placement_gym.errors import CorruptModelError, ModelError
from placement_gym.zoo.models import MODELS, get_spec


@dataclass
class LoadedModel:
    """An OpenVINO model with the identity that results record.

    Attributes:
        model: The model, static shapes.
        name: Zoo name, or the file stem / class name of a user model.
        version: Graph version (zoo recipe version; 0 for user models).
        meta: What was recorded when the IR was built (config, library versions, source path).
    """

    model: ov.Model
    name: str
    version: int
    meta: dict[str, Any] = field(default_factory=dict)


_CORE: ov.Core | None = None


def core() -> ov.Core:
    """The process-wide ``openvino.Core``."""
    global _CORE
    if _CORE is None:
        _CORE = ov.Core()
    return _CORE


def _convert_torch(module: Any, example_input: Any) -> ov.Model:
    import torch

    if isinstance(example_input, torch.Tensor):
        shapes = [list(example_input.shape)]
    elif isinstance(example_input, dict):
        shapes = [list(t.shape) for t in example_input.values()]
    else:
        shapes = [list(t.shape) for t in example_input]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.no_grad():
                return ov.convert_model(module.eval(), example_input=example_input, input=shapes)
        except Exception as exc:
            raise ModelError(f"OpenVINO could not convert {type(module).__name__}: {exc}") from exc


def ir_path(name: str) -> Path:
    """Path of the cached IR ``.xml`` of zoo model ``name``, converting it on first use.

    Raises:
        UnknownNameError: If ``name`` is not a zoo model.
        ModelError: If conversion fails (nothing is left in the cache).
    """
    spec = get_spec(name)

    def write(directory: Path) -> dict[str, Any]:
        import torch
        import transformers

        model = _convert_torch(spec.build(), spec.inputs())
        ov.save_model(model, directory / "model.xml", compress_to_fp16=False)
        return {
            "name": spec.name,
            "version": spec.version,
            "config": spec.config,
            "openvino": ov.get_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        }

    key = f"{spec.name}-v{spec.version}-ov{ov.__version__.split('-')[0]}"
    directory, _ = cached_entry("ir", key, write)
    return directory / "model.xml"


def _read_ir_or_onnx(path: Path) -> ov.Model:
    if not path.is_file():
        raise ModelError(f"model file {path} does not exist")
    if path.suffix == ".xml":
        weights = path.with_suffix(".bin")
        if not weights.is_file():
            raise ModelError(f"IR {path} has no weights file {weights.name} next to it")
    elif path.suffix != ".onnx":
        raise ModelError(f"unsupported model file {path}: expected an OpenVINO IR (.xml) or ONNX (.onnx)")
    try:
        return core().read_model(path)
    except Exception as exc:
        raise CorruptModelError(f"cannot read {path}: {str(exc).splitlines()[0]}") from exc


def load_model(source: Any, example_input: Any = None) -> LoadedModel:
    """Load a model from any supported source.

    Args:
        source: A zoo model name (see :data:`~placement_gym.zoo.models.MODELS`), a path to an OpenVINO IR
            ``.xml`` or an ``.onnx`` file, a ``torch.nn.Module`` (with ``example_input``), or an
            ``openvino.Model``.
        example_input: Example input of a torch module (tensor, tuple or dict of tensors) whose shapes
            become the model's static input shapes.

    Raises:
        UnknownNameError: For a string that is neither a zoo name nor an existing file.
        ModelError: For a missing file, an unsupported format or a failed conversion.
        CorruptModelError: For a file OpenVINO cannot read.
    """
    if isinstance(source, ov.Model):
        return LoadedModel(source, source.get_friendly_name() or "model", 0, {"source": "ov.Model"})
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if text in MODELS:
            spec = MODELS[text]
            path = ir_path(text)
            model = _read_ir_or_onnx(path)
            return LoadedModel(model, spec.name, spec.version, {"source": str(path), "config": spec.config})
        path = Path(text)
        if path.suffix in (".xml", ".onnx") or path.exists():
            model = _read_ir_or_onnx(path)
            return LoadedModel(model, path.stem, 0, {"source": str(path.resolve())})
        get_spec(text)  # raises UnknownNameError listing the zoo
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(source, torch.nn.Module):
        if example_input is None:
            raise ModelError("a torch.nn.Module needs example_input to be converted")
        model = _convert_torch(source, example_input)
        return LoadedModel(model, type(source).__name__, 0, {"source": "torch.nn.Module"})
    raise ModelError(
        f"cannot load a model from {type(source).__name__}; pass a zoo name, an .xml/.onnx path, "
        "a torch.nn.Module with example_input, or an openvino.Model"
    )


def random_inputs(model: ov.Model, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for every model input: floats in [0, 1), integers in {0, 1}.

    Integers stay in {0, 1} so that token ids, token types and attention masks are all valid.
    """
    rng = np.random.default_rng(seed)
    inputs = {}
    for param in model.inputs:
        shape = tuple(param.get_partial_shape().to_shape())
        dtype = param.get_element_type().to_dtype()
        if np.issubdtype(dtype, np.integer) or dtype == np.bool_:
            inputs[param.get_any_name()] = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            inputs[param.get_any_name()] = rng.random(shape, dtype=np.float32).astype(dtype)
    return inputs
