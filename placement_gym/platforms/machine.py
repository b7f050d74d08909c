"""What identifies this machine for measurements: CPU model, logical cores, ISA flags."""

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
