"""Turn any model source into an ``openvino.Model``: a zoo name, an IR or ONNX path, or a torch module.

Zoo models are converted once and cached as IR (see :mod:`placement_gym.cache`), keyed by model
name, recipe version and OpenVINO version. A zoo model is converted in a child process
(:func:`~placement_gym.isolation.run_isolated`), which the IR is then read back from: what a conversion
leaves in its process (for BERT 0.87 GB of resident memory: PyTorch's libraries and heap, and the PyTorch
model itself until a garbage collection) would otherwise stay in the process that goes on to measure
placements, on top of what measuring them takes. ``PLACEMENT_GYM_CONVERT_IN_PROCESS=1`` converts in the
calling process instead (each child process imports PyTorch and OpenVINO afresh: several seconds a model,
which a test suite that converts in many empty caches pays many times); the conversion's memory then stays
in that process.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from placement_gym.cache import cached_entry, recall_digest, record_digest
from placement_gym.errors import ConfigError, CorruptModelError, ModelError, UnknownNameError
from placement_gym.isolation import run_isolated
from placement_gym.zoo.models import MODELS, ModelSpec, get_spec

logger = logging.getLogger(__name__)

#: Static shape of each named model input, e.g. ``{"input_ids": [1, 128]}``.
InputShapes = Mapping[str, Sequence[int]]


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


def _ir_key(name: str) -> str:
    spec = get_spec(name)
    return f"{spec.name}-v{spec.version}-ov{ov.__version__.split('-')[0]}"


def ir_entry(name: str, *, defer_weights: bool = False) -> tuple[Path, str]:
    """The cached IR of zoo model ``name``: its ``.xml`` path and the SHA-256 of that ``.xml``.

    Converts the model on first use. The ``.xml`` (op names and structure) is always verified against
    its recorded hash; with ``defer_weights`` the ``.bin`` is only checked by size, and must be verified
    before it is read (as :func:`ir_path` does).

    Raises:
        UnknownNameError: If ``name`` is not a zoo model.
        ModelError: If conversion fails (nothing is left in the cache).
    """
    spec = get_spec(name)

    def write(directory: Path) -> dict[str, Any]:
        if _BUILT_IN.get(name) is spec and not convert_in_process():  # a child knows the spec by its name
            return run_isolated(_write_zoo_ir, name, str(directory), what=f"converting zoo model {name!r}")
        try:  # a spec registered at run time exists only here
            return _write_ir(spec, directory)
        finally:
            gc.collect()  # the converted PyTorch model sits in reference cycles

    defer = ("model.bin",) if defer_weights else ()
    directory, meta = cached_entry("ir", _ir_key(name), write, defer=defer)
    return directory / "model.xml", meta["files"]["model.xml"]["sha256"]


#: Environment variable: ``1`` (or ``true``, ``yes``) converts zoo models in the calling process, not a child.
IN_PROCESS_ENV_VAR = "PLACEMENT_GYM_CONVERT_IN_PROCESS"


def convert_in_process() -> bool:
    """Whether zoo models are converted in the calling process (``$PLACEMENT_GYM_CONVERT_IN_PROCESS`` is
    ``1``, ``true`` or ``yes``) rather than in a child process (the default: see the module docstring)."""
    return os.environ.get(IN_PROCESS_ENV_VAR, "").strip().lower() in ("1", "true", "yes")


#: The zoo's specs as this module found them on import: the ones a child process has under the same name.
_BUILT_IN: dict[str, ModelSpec] = dict(MODELS)


def _write_ir(spec: ModelSpec, directory: Path) -> dict[str, Any]:
    """Build ``spec``'s PyTorch model, convert it and save its IR as ``directory/model.xml``; returns the
    metadata recorded with it."""
    import torch
    import transformers

    model = _convert_torch(spec.build(), spec.inputs())
    ov.save_model(model, directory / "model.xml", compress_to_fp16=False)
    return {
        "name": spec.name,
        "version": spec.version,
        "config": spec.config,
        "openvino": ov.get_version(),
        "torch": str(torch.__version__),  # a str subclass of torch's: unpickling it would import torch
        "transformers": str(transformers.__version__),
    }


def _write_zoo_ir(name: str, directory: str) -> dict[str, Any]:
    """:func:`_write_ir` of the zoo's model ``name``: what :func:`ir_entry` runs in a child process."""
    return _write_ir(get_spec(name), Path(directory))


def ir_path(name: str) -> Path:
    """Path of the cached IR ``.xml`` of zoo model ``name``, converting it on first use and verifying
    every file's hash (once per process while they are unchanged).

    Raises:
        UnknownNameError: If ``name`` is not a zoo model.
        ModelError: If conversion fails (nothing is left in the cache).
    """
    return ir_entry(name)[0]


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
    except Exception as exc:  # keep OpenVINO's whole reason ("Incorrect weights in bin file!" is on line 2+)
        raise CorruptModelError(f"cannot read {path}: {' '.join(str(exc).split())}") from exc


#: Model files hashed by this process: resolved path -> (stamp of every part, SHA-256).
_FILE_HASHES: dict[str, tuple[tuple[tuple[int, int, int, int], ...], str]] = {}


def _stamp(part: Path) -> tuple[int, int, int, int]:
    st = part.stat()
    return (st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


def file_sha256(path: Path) -> str:
    """SHA-256 of a model file's content; for an IR, of the ``.xml`` followed by its ``.bin``.

    Hashed once while the files are unchanged (same size, inode, modification and change times), per
    process and across processes (a checksummed record under the cache's ``file-hashes/``, like git's
    index): a file replaced or edited in place, even with the same size, changes its change time and is
    hashed again; a record that does not match its checksum is ignored.
    """
    parts = (path, path.with_suffix(".bin")) if path.suffix == ".xml" else (path,)
    key = str(Path(path).resolve())
    stamps = tuple(_stamp(part) for part in parts)
    known = _FILE_HASHES.get(key)
    if known is not None and known[0] == stamps:
        return known[1]
    stored = recall_digest(key, stamps)
    if stored is not None:
        _FILE_HASHES[key] = (stamps, stored)
        return stored
    h = hashlib.sha256()
    for part in parts:
        with open(part, "rb") as f:
            for chunk in iter(lambda: f.read(2**20), b""):
                h.update(chunk)
    digest = h.hexdigest()
    if tuple(_stamp(part) for part in parts) == stamps:  # not changed while it was read
        _FILE_HASHES[key] = (stamps, digest)
        record_digest(key, stamps, digest)
    return digest


def _shape_template(shape: ov.PartialShape) -> list[str]:
    """The dimensions of a dynamic input shape to pass: its static ones, 1 for a dynamic batch, and a letter
    (``H``, ``W``, ... or ``D<i>``) for every other dynamic one; ``N,...`` when even the rank is dynamic."""
    if shape.rank.is_dynamic:
        return ["D0", "D1", "..."]
    dims = list(shape)
    letters = {2: "H", 3: "W"} if len(dims) == 4 else {1: "L"} if len(dims) == 2 else {}
    out = []
    for i, dim in enumerate(dims):
        if dim.is_static:
            out.append(str(dim.get_length()))
        else:
            out.append("1" if i == 0 and len(dims) > 1 else letters.get(i, f"D{i}"))
    return out


def make_static(model: ov.Model, input_shapes: InputShapes | None = None) -> ov.Model:
    """Give ``model`` static input shapes (in place) and return it.

    Inputs named in ``input_shapes`` get those shapes. Without them, an input whose only dynamic
    dimension is the first (the batch) gets batch 1, with a logged note; any other dynamic input is an
    error that says how to fix it.

    Raises:
        UnknownNameError: For a name in ``input_shapes`` that is not a model input.
        ConfigError: For a shape that is not a list of positive integers.
        ModelError: If the model keeps dynamic inputs, or OpenVINO cannot reshape it to the given shapes.
    """
    names = {port.get_any_name(): port for port in model.inputs}
    shapes: dict[str, list[int]] = {}
    for name, shape in (input_shapes or {}).items():
        if name not in names:
            raise UnknownNameError("model input", name, names)
        dims = list(shape) if isinstance(shape, (list, tuple)) else None
        if not dims or any(
            isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1 for d in dims
        ):
            raise ConfigError(f"input shape of {name!r} must be a list of positive integers, got {shape!r}")
        shapes[name] = [int(d) for d in dims]
    unresolved = []
    for name, port in names.items():
        shape = port.get_partial_shape()
        if name in shapes or not shape.is_dynamic:
            continue
        if shape.rank.is_static and len(shape) > 0 and all(d.is_static for d in list(shape)[1:]):
            shapes[name] = [1] + [d.get_length() for d in list(shape)[1:]]
            logger.info("model input %r has a dynamic batch dimension (%s); using batch 1", name, shape)
        else:
            unresolved.append((name, shape))
    if unresolved:
        found = "; ".join(f"{name} {shape}" for name, shape in unresolved)
        flags = " ".join(f"--input-shape {name}={','.join(_shape_template(shape))}" for name, shape in unresolved)
        python = ", ".join(f"{name!r}: [{', '.join(_shape_template(shape))}]" for name, shape in unresolved)
        unknown = [d for _, shape in unresolved for d in _shape_template(shape) if not d.isdigit() and d != "..."]
        raise ModelError(
            f"the model has dynamic input shapes ({found}); pass {flags}, with {', '.join(dict.fromkeys(unknown))} "
            f"the sizes to place it at (Python: input_shapes={{{python}}})"
        )
    if shapes:
        try:
            model.reshape({name: ov.PartialShape(shape) for name, shape in shapes.items()})
        except Exception as exc:
            raise ModelError(f"cannot reshape the model to {shapes}: {' '.join(str(exc).split())}") from exc
    return model


def load_model(
    source: Any, example_input: Any = None, input_shapes: InputShapes | None = None
) -> LoadedModel:
    """Load a model from any supported source, with static input shapes.

    Args:
        source: A zoo model name (see :data:`~placement_gym.zoo.models.MODELS`), a path to an OpenVINO IR
            ``.xml`` or an ``.onnx`` file, a ``torch.nn.Module`` (with ``example_input``), or an
            ``openvino.Model``.
        example_input: Example input of a torch module (tensor, tuple or dict of tensors) whose shapes
            become the model's static input shapes.
        input_shapes: Static shapes for dynamic model inputs, by input name (see :func:`make_static`;
            a dynamic batch dimension alone defaults to 1). Not for zoo models, whose shapes are fixed.

    Raises:
        UnknownNameError: For a string that is neither a zoo name nor an existing file, or an unknown
            input name in ``input_shapes``.
        ModelError: For a missing file, an unsupported format, a failed conversion, or dynamic input
            shapes that ``input_shapes`` does not resolve.
        CorruptModelError: For a file OpenVINO cannot read (with OpenVINO's whole message).
    """
    if input_shapes and isinstance(source, str) and source in MODELS:
        raise ConfigError(f"zoo model {source!r} has fixed input shapes; input_shapes is for your own models")
    if isinstance(source, ov.Model):
        model = make_static(source, input_shapes)
        return LoadedModel(model, model.get_friendly_name() or "model", 0, {"source": "ov.Model"})
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if text in MODELS:
            spec = MODELS[text]
            path = ir_path(text)
            model = _read_ir_or_onnx(path)
            return LoadedModel(model, spec.name, spec.version, {"source": str(path), "config": spec.config})
        path = Path(text)
        if path.suffix in (".xml", ".onnx") or path.exists():
            model = make_static(_read_ir_or_onnx(path), input_shapes)
            return LoadedModel(model, path.stem, 0, {"source": str(path.resolve())})
        get_spec(text)  # raises UnknownNameError listing the zoo
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(source, torch.nn.Module):
        if example_input is None:
            raise ModelError("a torch.nn.Module needs example_input to be converted")
        model = make_static(_convert_torch(source, example_input), input_shapes)
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
