"""Upper bounds that say why: a size that would need more memory than the machine has is refused up front.

A budget, a padding size or a network width given by a user turns into an allocation somewhere later
(a history list, a padded array, a weight matrix). Checking the bytes it implies against the memory
available now turns a late ``MemoryError`` (or an allocation that swaps the machine to a halt) into one
:class:`~placement_gym.errors.ConfigError` that names the value and the figure.
"""

from __future__ import annotations

import os

from placement_gym.errors import ConfigError

#: Bytes one evaluation of a run keeps at least (its history entry and the problem's record of it).
BYTES_PER_EVALUATION = 128
#: Fraction of the available memory one request may take: the rest is for everything else the run holds.
MEMORY_SHARE = 0.5


def available_memory() -> int:
    """Bytes of memory available to a new allocation now (``MemAvailable`` on Linux, else free pages)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # no way to tell: do not refuse
        return 1 << 62


def format_bytes(n: float) -> str:
    """``1.5 GiB`` style, for messages."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def require_memory(nbytes: float, what: str) -> None:
    """Refuse a request that needs more than :data:`MEMORY_SHARE` of the available memory.

    Args:
        nbytes: Bytes the request needs at least.
        what: The value responsible, as the user gave it (``"--budget 1000000000000"``).

    Raises:
        ConfigError: Naming ``what``, the bytes it needs and the bytes available.
    """
    limit = MEMORY_SHARE * available_memory()
    if nbytes > limit:
        raise ConfigError(
            f"{what} needs at least {format_bytes(nbytes)} of memory; this machine has "
            f"{format_bytes(available_memory())} available (at most half of it is allowed for one request); "
            "use a smaller value"
        )
