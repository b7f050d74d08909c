"""Run placements with OpenVINO's HETERO plugin and per-op rt_info ``affinity`` (as HSDAG does).

Every op of a clone of the model gets an ``affinity`` (HETERO's manual mode requires all or none):
op graph nodes take their device's ``ov_device``; constants, ops computed from constants only and
Parameters take the device of their first consumer; Results take their producer's.

What HETERO can and cannot measure:

* HETERO addresses *physical* OpenVINO devices. Virtual devices that share one (``cpu0`` and ``cpu1``
  both on ``"CPU"``) are indistinguishable to it: they are mapped to that physical device, the placement
  between them is lost, and the model compiles as if on one device with the compile properties of the
  first virtual device on it (passed via ``DEVICE_PROPERTIES``; note that HETERO silently ignores
  property names the device does not know, where a direct compile would fail). On the ``local`` platform every
  placement therefore measures the same thing: the whole model on one 1-thread CPU.
* HETERO's inference runs its subgraphs one after another, so independent branches on two devices never
  overlap within one inference: it measures sequential execution. Use the partitioned executor
  (:mod:`placement_gym.measured.dataflow`) for concurrent execution.
* Some affinity maps do not compile (reported: "Cannot sort subgraphs!"); that is an
  :class:`~placement_gym.measured.executor.ExecutionFailure` that the backend caches as infeasible.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import openvino as ov

from placement_gym.graph import CompGraph
from placement_gym.measured.executor import MAX_FAILED, ExecutionFailure, Executor, first_line, timed_infer
from placement_gym.platforms import Platform


@dataclass(eq=False)
class HeteroPlan:
    """A compiled HETERO model and its infer request."""

    compiled: ov.CompiledModel
    request: ov.InferRequest
    runs: int = 0


class HeteroExecutor(Executor):
    """Runs placements as one HETERO-compiled model.

    Args:
        model: The model to run (not modified; affinities are set on clones).
        graph: Its op graph (node names are the model's op friendly names).
        platform: The devices; ``placement`` entries index ``platform.devices``.
        core: The OpenVINO core to compile with.
        inputs: Model inputs by input name.
        cache_size: Number of compiled HETERO models kept (LRU).
        run_timeout: Seconds after which one inference counts as hung.
    """

    name = "hetero"

    def __init__(
        self,
        model: ov.Model,
        graph: CompGraph,
        platform: Platform,
        core: ov.Core,
        inputs: dict[str, np.ndarray],
        *,
        cache_size: int = 8,
        run_timeout: float = 600.0,
    ) -> None:
        self.model = model
        self.graph = graph
        self.core = core
        self.cache_size = cache_size
        self.run_timeout = run_timeout
        physical: list[str] = []
        config: dict[str, dict] = {}
        for d in platform.devices:
            if d.ov_device not in physical:
                physical.append(d.ov_device)
                config[d.ov_device] = d.compile_config()
        #: Physical device index of each platform device, shape ``(D,)``.
        self.physical_of = np.array([physical.index(d.ov_device) for d in platform.devices], dtype=np.int64)
        self.physical = physical
        self.device_string = "HETERO:" + ",".join(physical)
        self.config = {"DEVICE_PROPERTIES": config}
        self.inputs = {k: np.ascontiguousarray(v) for k, v in inputs.items()}
        self._position = {name: i for i, name in enumerate(graph.names)}
        self._plans: OrderedDict[bytes, HeteroPlan] = OrderedDict()
        self._failed: OrderedDict[bytes, str] = OrderedDict()  # at most MAX_FAILED

    def affinities(self, model: ov.Model, op_device: np.ndarray) -> None:
        """Set rt_info ``affinity`` on every op of ``model`` (a clone) for per-op placement ``op_device``."""
        phys = self.physical_of[np.asarray(op_device)]
        ordered = list(model.get_ordered_ops())
        affinity: dict[int, str] = {}
        for op in ordered:
            i = self._position.get(op.get_friendly_name())
            if i is not None and op.get_type_name() not in ("Constant", "Parameter", "Result"):
                affinity[op.get_instance_id()] = self.physical[int(phys[i])]
        for op in ordered:
            if op.get_type_name() == "Result":
                affinity[op.get_instance_id()] = affinity.get(
                    op.input_value(0).get_node().get_instance_id(), self.physical[0]
                )
        for op in reversed(ordered):  # consumers come first: a constant follows its first consumer
            if op.get_instance_id() in affinity:
                continue
            device = None
            for out in op.outputs():
                for target in out.get_target_inputs():
                    device = affinity.get(target.get_node().get_instance_id())
                    if device is not None:
                        break
                if device is not None:
                    break
            affinity[op.get_instance_id()] = device or self.physical[0]
        for op in ordered:
            op.get_rt_info()["affinity"] = affinity[op.get_instance_id()]

    def prepare(self, op_device: np.ndarray) -> HeteroPlan:
        key = self.physical_of[np.asarray(op_device)].astype(np.int8).tobytes()
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        if key in self._failed:
            raise ExecutionFailure(self._failed[key], cacheable=True)
        clone = self.model.clone()
        self.affinities(clone, op_device)
        try:
            compiled = self.core.compile_model(clone, self.device_string, self.config)
            request = compiled.create_infer_request()
            for name, data in self.inputs.items():
                request.set_tensor(name, ov.Tensor(data, shared_memory=True))
        except Exception as exc:
            reason = f"HETERO compile on {self.device_string} failed: {first_line(exc)}"
            self._failed[key] = reason
            if len(self._failed) > MAX_FAILED:
                self._failed.popitem(last=False)
            raise ExecutionFailure(reason, cacheable=True) from exc
        plan = self._plans[key] = HeteroPlan(compiled, request)
        while len(self._plans) > self.cache_size:
            self._plans.popitem(last=False)
        return plan

    def is_warm(self, plan: HeteroPlan) -> bool:
        return plan.runs > 0

    def run(self, plan: HeteroPlan) -> float:
        elapsed = timed_infer(plan.request, self.run_timeout)
        plan.runs += 1
        return elapsed

    def outputs(self, plan: HeteroPlan) -> list[np.ndarray]:
        return [plan.request.get_output_tensor(i).data.copy() for i in range(len(self.model.outputs))]

    def close(self) -> None:
        self._plans.clear()
