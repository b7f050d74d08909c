"""Read how the OpenVINO CPU runtime fuses IR ops into executed layers.

The compiled model's runtime graph (``compiled.get_runtime_model()``) has one node per executed layer;
its rt_info ``originalLayersNames`` lists the IR ops fused into it. Layers the runtime adds (Reorder,
Convert) list no IR op of the model and are ignored.
"""

from __future__ import annotations

import numpy as np
import openvino as ov

from placement_gym.errors import BackendError
from placement_gym.graph import CompGraph

#: Compile settings used to read fusions: fusions do not depend on thread count, but precision is recorded.
FUSION_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1}


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
    layers = []
    for node in compiled.get_runtime_model().get_ordered_ops():
        info = node.get_rt_info()
        names = info["originalLayersNames"].astype(str) if "originalLayersNames" in info else ""
        layers.append([n for n in names.split(",") if n])
    return layers


def op_layer_index(ops: CompGraph, fused_layers: list[list[str]]) -> np.ndarray:
    """The executed layer (index into ``fused_layers``) that runs each op, shape ``(n_ops,)``, int64.

    Ops no layer names (the runtime renames some, e.g. a MatMul folded into a FullyConnected named after
    its bias Add) take the layer of a neighbour: their first consumer that has one, else their first
    producer; ops with neither get a layer of their own (index ``>= len(fused_layers)``).
    """
    index = {name: i for i, name in enumerate(ops.names)}
    layer = np.full(ops.num_nodes, -1, dtype=np.int64)
    for k, names in enumerate(fused_layers):
        for name in names:
            i = index.get(name)
            if i is not None and layer[i] < 0:
                layer[i] = k
    succs, preds = ops.successors(), ops.predecessors()
    changed = True
    while changed:  # chains of unnamed ops resolve one step per pass
        changed = False
        for i in np.flatnonzero(layer < 0).tolist():
            for neighbours in (succs[i], preds[i]):
                named = [int(j) for j in neighbours if layer[j] >= 0]
                if named:
                    layer[i] = layer[named[0]]
                    changed = True
                    break
    orphans = np.flatnonzero(layer < 0)
    layer[orphans] = len(fused_layers) + np.arange(len(orphans))
    return layer
