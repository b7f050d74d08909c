"""Physical bounds of every platform figure, checked wherever a device, link or platform is built.

A figure outside its range is a typo or a hostile file, never a real machine: a link of 1e-320 B/s makes
every split infinitely slow (and infeasible, with a reason that blames a device), a memory of 1e30 bytes
overflows what the simulator adds up. The ranges are wide (from an 8-bit microcontroller's serial link to
a rack of accelerators; the tests' idealised "free" links of 1e18 B/s fit) and each says its unit.
:class:`~placement_gym.platforms.Device`, :class:`~placement_gym.platforms.Link` and
:class:`~placement_gym.platforms.Platform` check them when constructed, so a platform built in code is
held to the same bounds as one read from a file.
"""

from __future__ import annotations

import math
from numbers import Real

from placement_gym.errors import ConfigError, quote

#: field -> (lowest, highest, unit). Both ends are inclusive.
BOUNDS: dict[str, tuple[float, float, str]] = {
    "memory_bytes": (1, 2.0**50, "bytes (1 PiB at most)"),
    "memory_fraction": (1e-6, 1e3, "x the model's weight bytes"),
    "peak_flops": (1e6, 1e18, "FLOP/s"),
    "mem_bandwidth": (1e3, 1e18, "bytes/s"),
    "launch_overhead": (0.0, 10.0, "s"),
    "invoke_overhead": (0.0, 10.0, "s"),
    "contention": (0.0, 1.0, "(2 - the speed-up two such devices reach together)"),
    "op_efficiency": (1e-6, 1.0, "(share of the roofline)"),
    "latency": (0.0, 10.0, "s"),
    "bandwidth": (1e3, 1e18, "bytes/s"),
    "blocked_bandwidth": (1e3, 1e18, "bytes/s"),
}
#: Most devices a platform may have: its links grow with the square, the action space with the product.
MAX_DEVICES = 128


def check_figure(owner: str, field: str, value: object, kind: str | None = None) -> None:
    """Refuse ``value`` for ``field`` (a key of :data:`BOUNDS`, or ``kind`` for indexed fields such as
    ``peak_flops[f32]``) unless it is a finite real number within bounds.

    Raises:
        ConfigError: Naming ``owner``, the field, the value, the range and the unit.
    """
    low, high, unit = BOUNDS[kind or field]
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ConfigError(f"{owner}: {field} must be a finite number, got {quote(value)}")
    if not low <= value <= high:
        raise ConfigError(f"{owner}: {field} = {value!r} is outside [{low:g}, {high:g}] {unit}")


def check_count(owner: str, count: int) -> None:
    """Refuse a device count above :data:`MAX_DEVICES`.

    Raises:
        ConfigError: With the count and the bound.
    """
    if count > MAX_DEVICES:
        raise ConfigError(
            f"{owner} has {count} devices; at most {MAX_DEVICES} are supported (its {count * (count - 1)} "
            "links and every placement's per-device state grow with the count)"
        )


__all__ = ["BOUNDS", "MAX_DEVICES", "check_count", "check_figure"]
