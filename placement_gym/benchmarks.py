"""A benchmark: a model resolved into its op graph and the runtime's fused layers, ready to coarsen.

For zoo models the op graph and fused layers are cached on disk next to the IR (keyed by model name,
graph version and OpenVINO version), so a warm load reads two small files and never touches OpenVINO.
Any other model's fusions are read by compiling it in a child process, once per model content
(:func:`placement_gym.fusion.isolated_fused_layers`): a model that crashes OpenVINO's compiler gives a
:class:`~placement_gym.errors.BackendError`, not a dead process.

Example:
    >>> bench = load_benchmark("tiny_cnn")
    >>> coarse = bench.coarsen("fused")
    >>> coarse.num_groups <= bench.ops.num_nodes
    True
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openvino as ov

from placement_gym.cache import cached_entry
from placement_gym.coarsening import CoarseGraph, coarsen
from placement_gym.errors import CorruptModelError
from placement_gym.fusion import FUSION_CONFIG, isolated_fused_layers, runtime_fused_layers
from placement_gym.graph import CompGraph
from placement_gym.ov_graph import graph_from_ov
from placement_gym.zoo import MODELS, LoadedModel, load_model
from placement_gym.zoo.loading import InputShapes, file_sha256, ir_entry


@dataclass(eq=False)
class Benchmark:
    """A model's op graph with what coarsening and execution need.

    Attributes:
        name: Model name (zoo name or user model name).
        version: Graph version (zoo recipe version, 0 for user models).
        ops: The op graph.
        fused_layers: IR op names of each layer the CPU runtime executes (see :mod:`placement_gym.fusion`).
        source: Where the OpenVINO model comes from (IR path, or the in-memory model).
        input_shapes: The static input shapes a dynamic-shape model was given (None: as loaded).
        source_sha256: SHA-256 of a user model file (IR ``.xml`` + ``.bin``, or ``.onnx``); None for
            zoo and in-memory models. Results record it so a placement is never shown on another file.
        ir_sha256: For a zoo model, the SHA-256 of the cached IR ``.xml`` the op graph was built from (op
            names differ between conversions, so the graph is cached per IR).
    """

    name: str
    version: int
    ops: CompGraph
    fused_layers: list[list[str]]
    source: Path | ov.Model
    _model: ov.Model | None = field(default=None, repr=False)
    input_shapes: dict[str, list[int]] | None = None
    source_sha256: str | None = None
    ir_sha256: str | None = None
    _content_sha256: str | None = field(default=None, repr=False)

    @property
    def model(self) -> ov.Model:
        """The OpenVINO model (read lazily from the IR for zoo models)."""
        if self._model is None:
            if self.ir_sha256 is None:  # a user model file (an unpickled benchmark): still the same file?
                check_unchanged(self.source, self.source_sha256)
                self._model = load_model(self.source, input_shapes=self.input_shapes).model
            else:  # a zoo model: its cached IR is verified in full (or rebuilt) before it is read
                path, digest = ir_entry(self.name)
                if digest != self.ir_sha256:
                    raise CorruptModelError(
                        f"the cached IR of {self.name} was damaged and has been rebuilt since this benchmark "
                        "was loaded, and its op names changed; call load_benchmark again"
                    )
                self._model = load_model(path).model
        return self._model

    @property
    def ir_weights(self) -> Path | None:
        """The IR weights file (``.bin``) the model's constants are read from; None for an ONNX file or an
        in-memory model."""
        if isinstance(self.source, (str, Path)) and Path(self.source).suffix == ".xml":
            return Path(self.source).with_suffix(".bin")
        return None

    @property
    def content_sha256(self) -> str:
        """SHA-256 of the model's content, which every cached result of this model is keyed by: the model
        file's (``.xml`` + ``.bin``, or ``.onnx``), the cached IR ``.xml``'s for a zoo model (the cache
        verifies its weights against their recorded hash), or the serialized IR's for an in-memory model
        (computed once)."""
        if self.source_sha256 is not None:
            return self.source_sha256
        if self.ir_sha256 is not None:
            return self.ir_sha256
        if self._content_sha256 is None:
            self._content_sha256 = serialized_sha256(self.model)
        return self._content_sha256

    def identity(self) -> dict[str, Any]:
        """What a result records to find this model again: name and version, and for a user model file
        its path, hash and input shapes."""
        out: dict[str, Any] = {"model": self.name, "graph_version": self.version}
        if isinstance(self.source, Path) and self.source_sha256 is not None:
            out.update(model_path=str(self.source), model_sha256=self.source_sha256)
            if self.input_shapes:
                out["input_shapes"] = self.input_shapes
        return out

    def coarsen(self, level: str = "fused", k: int | None = None) -> CoarseGraph:
        """The op graph coarsened at ``level`` (see :func:`placement_gym.coarsening.coarsen`)."""
        return coarsen(self.ops, level, k=k, fused_layers=self.fused_layers)

    def coarsen_as(self, level: str) -> CoarseGraph:
        """Rebuild the coarse graph whose :attr:`CoarseGraph.level` is ``level`` (as recorded in results).

        Args:
            level: ``"ops"``, ``"fused"``, or either followed by ``"+k<K>"`` (e.g. ``"fused+k64"``).
        """
        base, _, k = level.partition("+k")
        return self.coarsen(base, k=int(k) if k else None)

    def __getstate__(self) -> dict[str, Any]:  # ov.Model does not pickle; zoo models reload from the IR
        state = dict(self.__dict__)
        state["_model"] = None
        if isinstance(self.source, ov.Model):
            raise TypeError(
                "a Benchmark built from an in-memory model cannot be pickled; save it as IR first"
            )
        return state


def _from_loaded(
    loaded: LoadedModel, source: Path | ov.Model, known: bool = False, **identity: Any
) -> Benchmark:
    """The benchmark of a loaded model; its fusions are read in a child process unless it is ``known`` (a
    zoo model), since compiling a model never seen may crash OpenVINO (:mod:`placement_gym.isolation`)."""
    meta = {"name": loaded.name, "version": loaded.version, "openvino": ov.get_version()}
    ops = graph_from_ov(loaded.model, meta)
    layers = runtime_fused_layers(loaded.model) if known else isolated_fused_layers(loaded.model)
    return Benchmark(loaded.name, loaded.version, ops, layers, source, loaded.model, **identity)


def _file_digest(source: Any) -> str | None:
    """The content hash of a model file source, taken before the file is read (None for other sources)."""
    if isinstance(source, (str, Path)) and str(source).endswith((".xml", ".onnx")):
        path = Path(source)
        parts = (path, path.with_suffix(".bin")) if path.suffix == ".xml" else (path,)
        if all(part.is_file() for part in parts):
            return file_sha256(path)
    return None


def check_unchanged(path: Path, digest: str | None) -> None:
    """Refuse a model file whose content is no longer ``digest`` (replaced or edited since it was hashed).

    Raises:
        CorruptModelError: If the file's content hash differs.
    """
    if digest is not None and file_sha256(Path(path)) != digest:
        raise CorruptModelError(
            f"model file {path} changed since it was loaded (its content hash differs); load it again"
        )


def serialized_sha256(model: ov.Model) -> str:
    """SHA-256 of an in-memory model serialized as IR (``.xml`` + ``.bin``)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="placement-gym-hash-") as tmp:
        xml = Path(tmp) / "model.xml"
        ov.serialize(model, str(xml), str(xml.with_suffix(".bin")))
        digest = hashlib.sha256()
        for part in (xml, xml.with_suffix(".bin")):
            digest.update(part.read_bytes())
        return digest.hexdigest()


def load_benchmark(
    source: Any, example_input: Any = None, input_shapes: InputShapes | None = None
) -> Benchmark:
    """Resolve a model source (zoo name, IR/ONNX path, torch module, ``ov.Model``) into a benchmark.

    Args:
        source: A zoo name, an ``.xml``/``.onnx`` path, a ``torch.nn.Module`` or an ``ov.Model``.
        example_input: Example input of a torch module.
        input_shapes: Static shapes for a model with dynamic inputs, e.g. ``{"x": [1, 3, 224, 224]}``
            (a dynamic batch dimension alone defaults to 1); see :func:`placement_gym.zoo.loading.make_static`.

    Raises:
        UnknownNameError, ModelError, CorruptModelError, ConfigError: See :func:`placement_gym.zoo.load_model`.
    """
    if isinstance(source, str) and source in MODELS and not input_shapes:
        spec = MODELS[source]
        # the weights are verified when the model itself is read (Benchmark.model), not on every load
        xml, ir_digest = ir_entry(source, defer_weights=True)

        def write(directory: Path) -> dict[str, Any]:
            path, digest = ir_entry(source)  # in full: the weights are read here
            if digest != ir_digest:
                raise CorruptModelError(f"the cached IR of {source} was damaged and rebuilt; load it again")
            bench = _from_loaded(load_model(path), path, known=True)
            bench.ops.meta.update(name=spec.name, version=spec.version)
            bench.ops.save(directory / "graph.npz")
            (directory / "fused.json").write_text(json.dumps(bench.fused_layers))
            return {
                "name": spec.name,
                "version": spec.version,
                "fusion_config": FUSION_CONFIG,
                "openvino": ov.get_version(),
                "ir_sha256": ir_digest,
            }

        key = f"{spec.name}-v{spec.version}-ov{ov.__version__.split('-')[0]}-ir{ir_digest[:16]}"
        directory, _ = cached_entry("graph", key, write)
        ops = CompGraph.load(directory / "graph.npz")
        layers = json.loads((directory / "fused.json").read_text())
        return Benchmark(spec.name, spec.version, ops, layers, xml, ir_sha256=ir_digest)
    before = _file_digest(source)
    loaded = load_model(source, example_input, input_shapes)
    if loaded.meta.get("source", "").endswith((".xml", ".onnx")):
        path = Path(loaded.meta["source"])
        shapes = (
            {p.get_any_name(): list(p.get_shape()) for p in loaded.model.inputs} if input_shapes else None
        )
        check_unchanged(path, before)  # the content read is the content hashed
        return _from_loaded(loaded, path, input_shapes=shapes, source_sha256=before)
    return _from_loaded(loaded, loaded.model)
