"""How many malloc arenas the process's threads share (glibc only).

glibc gives a thread that allocates an arena of its own, up to eight per CPU of the machine (16 on two
cores, whatever the process's affinity). A measured env has hundreds of threads (OpenVINO's, about two per
kept compiled segment; the compile threads; the devices' run threads) that allocate and free compiled
segments' memory as the compiled-segment cache turns over, and each arena keeps its own free memory,
fragmented, resident where live blocks share its pages: on two cores the process's resident memory crept
up step after step although the memory in use did not.
:func:`limit_malloc_arenas` caps the arenas at one per CPU the process may run on (at least two), which
keeps what a measured env holds flat; it is applied when :mod:`placement_gym.measured` is imported, before
OpenVINO is. It changes where freed memory is kept, not what is compiled or run (and a placement's
segments are compiled before its runs are timed).

glibc fixes the cap when the process makes its ninth arena, so a cap set later is ignored; and a cap the
user chose (``MALLOC_ARENA_MAX`` in the environment) is left as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

#: glibc's ``mallopt`` parameter for the most arenas (malloc.h).
M_ARENA_MAX = -8


def arena_cap() -> int:
    """Arenas :func:`limit_malloc_arenas` allows: one per CPU this process may run on, at least two."""
    return max(2, len(os.sched_getaffinity(0)))


def limit_malloc_arenas(libc: object | None = None) -> int | None:
    """Cap glibc's malloc arenas at :func:`arena_cap` with ``mallopt(M_ARENA_MAX, n)``; the cap, or None
    where nothing was set: ``MALLOC_ARENA_MAX`` is in the environment, the C library is not glibc (no
    ``mallopt`` or ``gnu_get_libc_version``), or ``mallopt`` refused."""
    if os.environ.get("MALLOC_ARENA_MAX") or not hasattr(os, "sched_getaffinity"):
        return None
    if libc is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            libc.gnu_get_libc_version  # glibc only: musl's mallopt ignores M_ARENA_MAX anyway
            mallopt = libc.mallopt
        except (OSError, AttributeError):
            return None
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        mallopt.restype = ctypes.c_int
    n = arena_cap()
    return n if libc.mallopt(M_ARENA_MAX, n) == 1 else None  # type: ignore[attr-defined]
