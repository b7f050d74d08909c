"""Where a measured env's memory goes, step by step, on never-seen random placements.

Runs ``--steps N`` one-shot episodes of ``--env`` with the never-seen random placements of
:mod:`experiments.speed.measured_env` (same ``--seed``) and emits one JSON line after ``gym.make``, after
the first ``reset`` and after every step, with the process's memory in MB
(:func:`memory_figures`: resident set ``rss`` and its peak ``peak_rss``,
``anon`` and ``file`` pages, ``pss``, ``threads``, and glibc's ``heap``, ``heap_used``, ``heap_free``,
``mmapped``) and the partitioned executor's cache: compiled segments kept (``compiled``), their estimated
MB (``estimated``), the segments of the step's placement (``segments``) and how many were new (``new``).
With ``--trim`` a last line gives the figures after the allocator's free memory was handed back
(``malloc_trim``), which tells free-but-resident memory from memory in use, and the wall ``seconds`` that
took.

``--compile-threads`` and ``--max-compiled-mb`` pass those backend settings (default: the env's own).
Rows are appended to ``--out`` (JSON lines) as they come. RSS does not depend on timing, so the figures can
be taken on a loaded machine; the cores the process may run on do matter (run it under ``taskset`` for a
one-core platform, without it for all cores).

Usage:
    python -m experiments.speed.measured_memory --env DevicePlacement-bert-local-measured-v1 --steps 20 --trim --out runs/memory.jsonl
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from functools import lru_cache
from typing import Any

from experiments.speed.measured_env import pss_mb, row_writer, step_parser, unseen_actions


def _status_kb(fields: tuple[str, ...]) -> dict[str, int]:
    found: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in fields:
                    parts = rest.split()
                    found[name] = int(parts[0])
    except OSError:
        pass
    return found


def memory_figures() -> dict[str, Any]:
    """This process's memory in MB: ``rss``, ``peak_rss``, ``anon`` (resident anonymous memory: heap, stacks),
    ``file`` (resident file pages, such as the model's weights file), ``pss``, and ``threads``; plus the
    allocator's figures of :func:`_allocator_figures` where there are any. Figures Linux does not give are
    left out."""
    status = _status_kb(("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"))
    names = {"VmRSS": "rss", "VmHWM": "peak_rss", "RssAnon": "anon", "RssFile": "file"}
    row: dict[str, Any] = {names[k]: round(v / 1024, 1) for k, v in status.items() if k in names}
    if "Threads" in status:
        row["threads"] = status["Threads"]
    pss = pss_mb()
    if pss is not None:
        row["pss"] = round(pss, 1)
    row.update(_allocator_figures() or {})
    return row


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")
    ]  # fmt: skip


@lru_cache(maxsize=1)
def _libc() -> Any:
    """glibc, or None (another C library, or no ``mallinfo2``/``malloc_trim``)."""
    if os.name != "posix":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def _allocator_figures() -> dict[str, float] | None:
    """glibc's ``mallinfo2`` over all arenas, in MB: ``heap`` (held in arenas), ``heap_used`` and
    ``heap_free`` (of it, in use and free: free memory stays resident where its pages were touched, until
    trimmed), ``mmapped`` (large
    blocks mapped on their own, returned to the system when freed); None without glibc."""
    libc = _libc()
    if libc is None:
        return None
    info = libc.mallinfo2()
    mb = 2.0**20
    return {
        "heap": round(info.arena / mb, 1),
        "heap_used": round(info.uordblks / mb, 1),
        "heap_free": round(info.fordblks / mb, 1),
        "mmapped": round(info.hblkhd / mb, 1),
    }


def _release_free_memory() -> bool:
    """Hand the C allocator's free memory in every arena back to the system (glibc's ``malloc_trim(0)``);
    live blocks are untouched. False where there is no such call (not glibc)."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def main(argv: list[str] | None = None) -> None:
    parser = step_parser(__doc__, steps=20)
    parser.add_argument("--compile-threads", type=int, default=None)
    parser.add_argument("--max-compiled-mb", type=float, default=None)
    parser.add_argument("--trim", action="store_true")
    args = parser.parse_args(argv)

    import gymnasium as gym
    import numpy as np

    import placement_gym  # noqa: F401  (registers the IDs)

    emit = row_writer(args.out, env=args.env, cores=len(os.sched_getaffinity(0)))

    settings: dict[str, Any] = {"compile_threads": args.compile_threads}
    if args.max_compiled_mb is not None:
        settings["max_compiled_bytes"] = int(args.max_compiled_mb * 2**20)
    kwargs = {k: v for k, v in settings.items() if v is not None}
    start = time.perf_counter()
    env = gym.make(args.env, **({"backend_kwargs": kwargs} if kwargs else {}))
    executor = env.unwrapped.problem.backend.executor

    def cache() -> dict[str, Any]:
        return {"compiled": executor.num_compiled, "estimated": round(executor.compiled_bytes / 2**20, 1)}

    emit({"figure": "make", "seconds": round(time.perf_counter() - start, 2), **memory_figures(), **cache()})
    rng = np.random.default_rng(args.seed)
    env.reset(seed=args.seed)
    emit({"figure": "reset", **memory_figures(), **cache()})
    for i, action in enumerate(unseen_actions(env.action_space.nvec, rng, args.steps)):
        env.reset()
        lookups, compiled = executor.stats["lookups"], executor.stats["compiled"]
        start = time.perf_counter()
        _, _, _, _, info = env.step(action)
        row = {"figure": "step", "index": i, "seconds": round(time.perf_counter() - start, 2)}
        row.update(segments=executor.stats["lookups"] - lookups, new=executor.stats["compiled"] - compiled)
        row.update(memory_figures(), **cache(), latency=info.get("latency"))
        emit(row)
    if args.trim:
        start = time.perf_counter()
        released = _release_free_memory()
        seconds = round(time.perf_counter() - start, 4)
        emit({"figure": "trimmed", "released": released, "seconds": seconds, **memory_figures(), **cache()})
    env.close()


if __name__ == "__main__":
    main()
