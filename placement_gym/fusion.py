"""Read how the OpenVINO CPU runtime fuses IR ops into executed layers.

The compiled model's runtime graph (``compiled.get_runtime_model()``) has one node per executed layer;
its rt_info ``originalLayersNames`` lists the IR ops fused into it. Layers the runtime adds (Reorder,
Convert) list no IR op of the model and are ignored.
"""

from __future__ import annotations

import openvino as ov

from placement_gym.errors import BackendError

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
