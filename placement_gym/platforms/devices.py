"""The data of a platform: :class:`Device`, :class:`Link` and :class:`Platform`.

A leaf module (of the package it imports only the figures' bounds), so that the measured backend can use these types
while the ``local`` platform is built from measurements (:mod:`placement_gym.platforms.local`). Loading
platforms by name or file: :func:`placement_gym.platforms.load_platform`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from placement_gym.errors import ConfigError, UnknownNameError, quote
from placement_gym.platforms.bounds import check_count, check_figure

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
            raise ConfigError(f"device {quote(self.name)}: kind {quote(self.kind)} is not one of {KINDS}")
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"device {quote(self.name)}: precision {quote(self.precision)} is not one of {PRECISIONS}"
            )
        if self.precision not in self.peak_flops:
            raise ConfigError(
                f"device {quote(self.name)} has no peak_flops for its precision {self.precision!r}"
            )
        if self.memory_bytes is None and self.memory_fraction is None:
            raise ConfigError(f"device {quote(self.name)} needs memory_bytes or memory_fraction")
        owner = f"device {quote(self.name)}"
        figures: list[tuple[str, object, str]] = [
            (key, getattr(self, key), key)
            for key in ("mem_bandwidth", "launch_overhead", "invoke_overhead", "contention")
        ]
        figures += [(key, getattr(self, key), key) for key in ("memory_bytes", "memory_fraction")
                    if getattr(self, key) is not None]  # fmt: skip
        figures += [(f"peak_flops[{k}]", v, "peak_flops") for k, v in self.peak_flops.items()]
        figures += [(f"op_efficiency[{k}]", v, "op_efficiency") for k, v in self.op_efficiency.items()]
        for key, value, kind in figures:
            check_figure(owner, key, value, kind)

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
        check_figure("a link", "latency", self.latency)
        check_figure("a link", "bandwidth", self.bandwidth)
        if self.blocked_bandwidth is not None:
            check_figure("a link", "blocked_bandwidth", self.blocked_bandwidth)

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
        cores: The CPU cores a platform of this machine (``local``) was built for and calibrated on; empty
            for platforms described by data.
    """

    name: str
    description: str
    devices: tuple[Device, ...]
    links: dict[tuple[int, int], Link]
    host: int = 0
    sources: tuple[str, ...] = ()
    cores: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_count(f"platform {quote(self.name)}", len(self.devices))
        names = [d.name for d in self.devices]
        if not names or len(set(names)) != len(names):
            raise ConfigError(
                f"platform {quote(self.name)} needs at least one device and unique device names"
            )
        for i, j in self.links:
            if i == j or not (0 <= i < len(names) and 0 <= j < len(names)):
                raise ConfigError(
                    f"platform {quote(self.name)}: a link {i} -> {j} "
                    + ("from a device to itself (data stays on a device; remove it)" if i == j else
                       f"between devices that do not exist (0..{len(names) - 1})")
                )  # fmt: skip
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
