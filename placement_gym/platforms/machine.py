"""What identifies this machine for measurements: CPU model, logical cores, ISA flags; the cores this process
may run on."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def cpu_info() -> tuple[str, float, set[str]]:
    """(model name, clock in GHz, flags) from /proc/cpuinfo; conservative defaults elsewhere."""
    name, ghz, flags = "unknown-cpu", 2.0, set()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return name, ghz, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "model name" and name == "unknown-cpu":
            name = value
        elif key == "cpu MHz" and ghz == 2.0:
            ghz = float(value) / 1000.0
        elif key == "flags" and not flags:
            flags = set(value.split())
    return name, ghz, flags


#: CPU flags that change what OpenVINO's CPU plugin runs (kernels, precisions); part of a machine's identity.
ISA_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8",
)  # fmt: skip


def machine_fingerprint() -> dict[str, Any]:
    """What a measurement on this machine depends on: CPU model, logical cores and the ISA flags of
    :data:`ISA_FLAGS` it has. (Not the cores this process may use: a 1-thread profile taken under
    ``taskset`` is the same profile.)"""
    name, _, flags = cpu_info()
    return {"cpu": name, "cores": os.cpu_count() or 1, "isa": [f for f in ISA_FLAGS if f in flags]}


def process_cores() -> tuple[int, ...]:
    """The cores this process may run on (its affinity set, all of the machine's unless it was started
    under ``taskset`` or pinned), sorted."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


def core_span(cores: tuple[int, ...] | list[int]) -> str:
    """A core set written compactly: ``0-3`` for a run of three or more, else ``0,2,5``."""
    cores = tuple(sorted(cores))
    if len(cores) > 2 and cores == tuple(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(str(c) for c in cores)


def cores_key(cores: tuple[int, ...]) -> str:
    """The part of a cache key that names a core set: ``cores0-3``, ``cores1``, ``cores0_2_5``."""
    return "cores" + core_span(cores).replace(",", "_")
