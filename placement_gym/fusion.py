"""Read how the OpenVINO CPU runtime fuses IR ops into executed layers.

The compiled model's runtime graph (``compiled.get_runtime_model()``) has one node per executed layer;
its rt_info ``originalLayersNames`` lists the IR ops fused into it. Layers the runtime adds (Reorder,
Convert) list no IR op of the model and are ignored. Which layer owns an op that no layer names is
decided once, by :func:`op_layer_index`.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from placement_gym.errors import BackendError
from placement_gym.graph import CompGraph
from placement_gym.isolation import run_isolated

if TYPE_CHECKING:  # the op -> layer rule needs no OpenVINO; only reading fusions does
    import openvino as ov

#: Compile settings used to read fusions: fusions do not depend on thread count, but precision is recorded.
FUSION_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1}
#: Fusions read in a child process, by the SHA-256 of the serialized model, device and settings.
_ISOLATED: dict[str, list[list[str]]] = {}


def runtime_fused_layers(model: ov.Model, device: str = "CPU", config: dict | None = None) -> list[list[str]]:
    """The IR op names fused into each executed layer, in execution order.

    Args:
        model: The model (not modified).
        device: OpenVINO device to compile for.
        config: Compile properties; default :data:`FUSION_CONFIG`.

    Raises:
        BackendError: If the model does not compile on ``device``.
    """
    from placement_gym.zoo import core

    try:
        compiled = core().compile_model(model, device, dict(config or FUSION_CONFIG))
    except Exception as exc:
        raise BackendError(f"cannot compile the model on {device} to read its fusions: {exc}") from exc
    return [original_names(node) for node in compiled.get_runtime_model().get_ordered_ops()]


def isolated_fused_layers(
    model: ov.Model, device: str = "CPU", config: dict | None = None
) -> list[list[str]]:
    """:func:`runtime_fused_layers` of a model the project has not seen, run in a child process
    (:func:`placement_gym.isolation.run_isolated`): a compiler crash on it becomes a
    :class:`~placement_gym.errors.BackendError` instead of killing this process. The model is handed
    over as a temporary IR; results are memoised by its content.

    Raises:
        BackendError: If the model does not compile, or compiling it crashes the child process.
    """
    import openvino as ov

    config = dict(config or FUSION_CONFIG)
    with tempfile.TemporaryDirectory(prefix="placement-gym-fusion-") as tmp:
        xml = Path(tmp) / "model.xml"
        ov.serialize(model, str(xml), str(xml.with_suffix(".bin")))
        digest = hashlib.sha256(repr((device, sorted(config.items()))).encode())
        for path in (xml, xml.with_suffix(".bin")):
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(2**20), b""):
                    digest.update(chunk)
        key = digest.hexdigest()
        if key not in _ISOLATED:
            what = f"compiling model {model.get_friendly_name()!r} on {device} to read its fusions"
            _ISOLATED[key] = run_isolated(_fused_layers_of_file, str(xml), device, config, what=what)
    return [list(names) for names in _ISOLATED[key]]


def _fused_layers_of_file(xml: str, device: str, config: dict) -> list[list[str]]:
    from placement_gym.zoo import core

    return runtime_fused_layers(core().read_model(xml), device, config)


def original_names(node: ov.Node) -> list[str]:
    """The IR op names a node of a runtime model executes (rt_info ``originalLayersNames``)."""
    info = node.get_rt_info()
    names = info["originalLayersNames"].astype(str) if "originalLayersNames" in info else ""
    return [n for n in names.split(",") if n]


def resolve_owners(
    owner: np.ndarray, successors: Sequence[Sequence[int]], predecessors: Sequence[Sequence[int]]
) -> np.ndarray:
    """The one rule for a node that no executed layer names: it joins its consumers' layer, else its
    producers'.

    A node without an owner takes the owner of its consumers when they all have the same one, else the
    owner of its producers when they all have the same one, else stays without. Consumers come first
    because that is where the runtime puts such work: it folds a MatMul into the FullyConnected named
    after its bias Add, computes static shapes once into constants its consumers read, and runs a Reorder
    for the layer that needs the layout. Requiring *all* of them to agree (not taking the first) is what
    keeps the layers a DAG: a node whose consumers (or producers) are all in one layer can join it without
    closing a cycle, whatever the rest of the graph.

    Consumers are resolved first, in reverse topological order, so a chain of unnamed nodes follows the
    layer it feeds; producers then, in topological order.

    Args:
        owner: Owner of each node, shape ``(n,)``, int64, ``-1`` for none; nodes numbered in a topological
            order.
        successors: Consumers of each node (``n`` lists of node indices).
        predecessors: Producers of each node.

    Returns:
        A new array, shape ``(n,)``, int64, ``-1`` where neither rule applies.
    """
    owner = np.array(owner, dtype=np.int64)
    unowned = np.flatnonzero(owner < 0).tolist()
    for neighbours, order in ((successors, reversed(unowned)), (predecessors, unowned)):
        for i in order:
            if owner[i] < 0:
                found = {int(owner[j]) for j in neighbours[i]}
                if len(found) == 1 and -1 not in found:
                    owner[i] = found.pop()
    return owner


def op_layer_index(ops: CompGraph, fused_layers: Sequence[Sequence[str]]) -> np.ndarray:
    """The executed layer (index into ``fused_layers``) that runs each op, shape ``(n_ops,)``, int64.

    An op belongs to the first layer that names it. Ops no layer names (the runtime renames some, e.g. a
    MatMul folded into a FullyConnected named after its bias Add) follow :func:`resolve_owners`; ops it
    leaves without a layer get one of their own each (index ``>= len(fused_layers)``). This is the one
    op -> layer rule: the ``fused`` coarsening level groups ops by it, the measured profile splits each
    layer's time over its ops by it, and the roofline charges each layer's launch overhead by it.
    """
    index = {name: i for i, name in enumerate(ops.names)}
    layer = np.full(ops.num_nodes, -1, dtype=np.int64)
    for k, names in enumerate(fused_layers):
        for name in names:
            i = index.get(name)
            if i is not None and layer[i] < 0:
                layer[i] = k
    layer = resolve_owners(layer, ops.successors(), ops.predecessors())
    orphans = np.flatnonzero(layer < 0)
    layer[orphans] = len(fused_layers) + np.arange(len(orphans))
    return layer
