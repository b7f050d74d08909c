"""The data of a platform: :class:`Device`, :class:`Link` and :class:`Platform`.

A leaf module (it imports nothing else of the package), so that the measured backend can use these types
while the ``local`` platform is built from measurements (:mod:`placement_gym.platforms.local`). Loading
platforms by name or file: :func:`placement_gym.platforms.load_platform`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

from placement_gym.errors import ConfigError, UnknownNameError

KINDS = ("cpu", "gpu", "npu", "virtual")
PRECISIONS = ("f32", "f16", "bf16", "i8")


@dataclass(frozen=True)
class Device:
    """One device a group can be placed on.

    Attributes:
        name: Unique name within the platform (``"cpu"``, ``"gpu"``, ``"cpu0"``...).
        kind: One of :data:`KINDS` (``virtual``: a share of a real device, e.g. one CPU core).
        ov_device: OpenVINO device string (``"CPU"``, ``"GPU.0"``, ``"NPU"``).
        precision: Inference precision (``f32``, ``f16``, ``bf16``), passed to OpenVINO as
            ``INFERENCE_PRECISION_HINT`` and used by the simulator's peak-FLOP/s lookup.
        ov_config: Further compile properties (``INFERENCE_NUM_THREADS``, ``ENABLE_CPU_PINNING``...).
        memory_bytes: Memory capacity for weights and live activations (``None`` until a platform with
            relative memory is resolved for a model: :func:`resolve_memory`).
        peak_flops: Peak FLOP/s per precision.
        mem_bandwidth: Memory bandwidth in bytes/s.
        launch_overhead: Fixed cost per executed layer (kernel launch, scheduling), seconds.
        op_efficiency: Fraction of the roofline an op type reaches (key ``"default"`` for the rest).
        invoke_overhead: Fixed cost, seconds, each time the device starts a subgraph (a group none of whose
            predecessors runs on the same device): an NPU inference call, a separate infer request.
        contention: For devices that share hardware (virtual devices with the same ``ov_device``): extra
            run time per second of overlap with work on another such device; ``2 - s`` where ``s`` is the
            speed-up two of them reach together (0: fully parallel, 1: no overlap at all).
        memory_fraction: Memory capacity as a share of the model's weight bytes (relative memory), or
            ``None``. A resolved device keeps it next to its ``memory_bytes``.
    """

    name: str
    kind: str
    ov_device: str
    precision: str
    memory_bytes: int | None
    peak_flops: dict[str, float]
    mem_bandwidth: float
    launch_overhead: float
    ov_config: dict[str, Any] = field(default_factory=dict)
    op_efficiency: dict[str, float] = field(default_factory=dict)
    invoke_overhead: float = 0.0
    contention: float = 0.0
    memory_fraction: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"device {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"device {self.name!r}: precision {self.precision!r} is not one of {PRECISIONS}"
            )
        if self.precision not in self.peak_flops:
            raise ConfigError(f"device {self.name!r} has no peak_flops for its precision {self.precision!r}")
        if self.memory_bytes is None and self.memory_fraction is None:
            raise ConfigError(f"device {self.name!r} needs memory_bytes or memory_fraction")
        numbers = {
            "memory_bytes": 1 if self.memory_bytes is None else self.memory_bytes,
            "memory_fraction": 1.0 if self.memory_fraction is None else self.memory_fraction,
            "mem_bandwidth": self.mem_bandwidth,
            "launch_overhead": self.launch_overhead,
            "invoke_overhead": self.invoke_overhead,
            "contention": self.contention,
        }
        numbers.update({f"peak_flops[{k}]": v for k, v in self.peak_flops.items()})
        numbers.update({f"op_efficiency[{k}]": v for k, v in self.op_efficiency.items()})
        for key, value in numbers.items():
            if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
                raise ConfigError(f"device {self.name!r}: {key} must be a finite number, got {value!r}")
        for key, value in numbers.items():
            if key in ("memory_bytes", "memory_fraction", "mem_bandwidth") or key.startswith("peak_flops"):
                if not value > 0:
                    raise ConfigError(f"device {self.name!r}: {key} must be > 0, got {value!r}")
        if not 0 <= self.contention <= 1:
            raise ConfigError(f"device {self.name!r}: contention {self.contention!r} not in [0, 1]")
        if not (self.launch_overhead >= 0 and self.invoke_overhead >= 0):
            raise ConfigError(f"device {self.name!r}: overheads must be >= 0 seconds")
        for op, eff in self.op_efficiency.items():
            if not 0 < eff <= 1:
                raise ConfigError(f"device {self.name!r}: op_efficiency[{op!r}] = {eff!r} not in (0, 1]")

    def compile_config(self) -> dict[str, Any]:
        """OpenVINO compile properties for this device, precision included."""
        return {**self.ov_config, "INFERENCE_PRECISION_HINT": self.precision}

    def efficiency(self, op_type: str) -> float:
        return self.op_efficiency.get(op_type, self.op_efficiency.get("default", 1.0))


@dataclass(frozen=True)
class Link:
    """A transfer path between two devices: ``latency + bytes / bandwidth`` seconds per tensor.

    ``blocked_bandwidth`` is the rate for activations the CPU plugin keeps in blocked layouts (rank >= 4
    tensors of convolutional nets): crossing a segment boundary reorders them to a plain layout and back,
    which on one machine costs far more than copying (measured by :mod:`placement_gym.platforms.local`).
    ``None`` means the same as ``bandwidth``.
    """

    latency: float
    bandwidth: float
    blocked_bandwidth: float | None = None

    def __post_init__(self) -> None:
        ends = (self.latency, self.bandwidth, self.blocked_bandwidth or 1.0)
        if not all(isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v) for v in ends):
            raise ConfigError(
                f"a link needs finite numbers, got latency={self.latency!r}, bandwidth={self.bandwidth!r}, "
                f"blocked_bandwidth={self.blocked_bandwidth!r}"
            )
        if not (self.latency >= 0 and self.bandwidth > 0):
            raise ConfigError(
                f"a link needs latency >= 0 and bandwidth > 0, got latency={self.latency!r}, "
                f"bandwidth={self.bandwidth!r}"
            )
        if self.blocked_bandwidth is not None and not self.blocked_bandwidth > 0:
            raise ConfigError(f"a link's blocked_bandwidth must be > 0, got {self.blocked_bandwidth!r}")

    @property
    def blocked_factor(self) -> float:
        """How many plain bytes one blocked-layout byte costs (``bandwidth / blocked_bandwidth``)."""
        return 1.0 if self.blocked_bandwidth is None else self.bandwidth / self.blocked_bandwidth


@dataclass(frozen=True)
class Platform:
    """Devices and links.

    Attributes:
        name: Registry name (``"cpu-dgpu"``...).
        description: One line, with what the figures are modelled on.
        devices: The devices; a placement's entries index this list.
        links: ``links[(i, j)]`` for every ordered pair of distinct devices.
        host: Index of the device where the model's inputs arrive and outputs are read.
        sources: Citations for the figures.
    """

    name: str
    description: str
    devices: tuple[Device, ...]
    links: dict[tuple[int, int], Link]
    host: int = 0
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        names = [d.name for d in self.devices]
        if not names or len(set(names)) != len(names):
            raise ConfigError(f"platform {self.name!r} needs at least one device and unique device names")
        for i in range(len(names)):
            for j in range(len(names)):
                if i != j and (i, j) not in self.links:
                    raise ConfigError(f"platform {self.name!r} has no link {names[i]} -> {names[j]}")
        if isinstance(self.host, bool) or not isinstance(self.host, int) or not 0 <= self.host < len(names):
            raise ConfigError(
                f"platform {self.name!r}: host {self.host!r} is not a device index 0..{len(names) - 1}"
            )

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def unresolved(self) -> bool:
        """True if some device's memory is still a fraction of a model not yet given (:func:`resolve_memory`)."""
        return any(d.memory_bytes is None for d in self.devices)

    def capacities(self) -> list[int]:
        """Memory capacity of each device in bytes.

        Raises:
            ConfigError: If the platform's memory is relative and not resolved for a model yet.
        """
        if self.unresolved:
            raise ConfigError(
                f"platform {self.name!r} gives memory as fractions of the model's weights; resolve it for a "
                "model first (placement_gym.platforms.resolve_memory, or build the problem with "
                "PlacementProblem.make / DevicePlacementEnv from names)"
            )
        return [int(d.memory_bytes) for d in self.devices]  # type: ignore[arg-type]

    def device_index(self, name: str) -> int:
        """Index of the device called ``name``.

        Raises:
            UnknownNameError: If the platform has no such device (lists the ones it has).
        """
        for i, d in enumerate(self.devices):
            if d.name == name:
                return i
        raise UnknownNameError(f"device of platform {self.name!r}", name, [d.name for d in self.devices])
