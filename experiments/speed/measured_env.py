"""Cost of a measured env: cold and warm ``gym.make``, step time on never-seen placements, peak memory.

One process per figure, so each make is a fresh start:

* ``make``: wall time of ``gym.make(ENV_ID)`` after the imports (``PLACEMENT_GYM_CACHE=<empty dir>`` gives
  the cold figure: conversion, graphs, the ``local`` platform's figures and profiles);
* ``steps``: ``--steps N`` one-shot episodes (``reset`` + ``step``) with uniformly random, never-seen
  placements; per step its wall time, the latency, its relative 95% interval, the load average, the peak
  RSS so far and the proportional set size now (``pss_mb``: shared pages, such as one file mapped several
  times, counted once; Linux); at the end the peak RSS of the process (``ru_maxrss``).

``--executor`` and ``--max-blob-bytes`` pass ``backend_kwargs`` ``executor`` and ``max_blob_bytes`` (default:
the env's own). Rows are appended to
``--out`` (JSON lines) as they come, so a long run can be read while it runs.

Usage:
    python -m experiments.speed.measured_env --env DevicePlacement-bert-local-measured-v1 --steps 50 --out results/bench_env.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections.abc import Callable, Iterator
from typing import Any

#: The env the measured-env speed scripts time unless ``--env`` says otherwise.
DEFAULT_ENV = "DevicePlacement-bert-local-measured-v1"


def pss_mb() -> float | None:
    """This process's proportional set size now (pages shared with others, or mapped several times, counted
    in part), in MB, or None where ``/proc/self/smaps_rollup`` is missing."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def unseen_actions(nvec: Any, rng: Any, count: int) -> Iterator[Any]:
    """``count`` uniformly random actions of a ``MultiDiscrete(nvec)`` space drawn with ``rng`` (a numpy
    ``Generator``), none twice: a repeat is drawn again, so every step measures a new placement."""
    seen: set[bytes] = set()
    for _ in range(count):
        action = rng.integers(0, nvec)
        while action.tobytes() in seen:
            action = rng.integers(0, nvec)
        seen.add(action.tobytes())
        yield action


def step_parser(doc: str, steps: int) -> argparse.ArgumentParser:
    """The parser of a measured-env speed script (described by the first line of ``doc``) with the options
    they all take: ``--env``, ``--steps`` (default ``steps``), ``--seed`` and ``--out`` (the JSON-lines
    file rows are appended to)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--env", default=DEFAULT_ENV)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    return parser


def row_writer(path: str | None, **fields: Any) -> Callable[[dict], None]:
    """A function that adds ``fields`` and the 1-minute load average to a row, prints it as a JSON line and
    appends it to ``path`` (if given) at once, so a long run can be read while it runs."""
    out = open(path, "a") if path else None

    def emit(row: dict) -> None:
        row.update(fields, load=os.getloadavg()[0])
        line = json.dumps(row)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    return emit


def main(argv: list[str] | None = None) -> None:
    parser = step_parser(__doc__, steps=0)
    parser.add_argument("--executor", default=None)
    parser.add_argument("--max-blob-bytes", type=int, default=None)
    args = parser.parse_args(argv)
    emit = row_writer(args.out, env=args.env, executor=args.executor)

    start = time.perf_counter()
    import gymnasium as gym
    import numpy as np

    import placement_gym  # noqa: F401  (registers the IDs)

    imports = time.perf_counter() - start
    settings = {"executor": args.executor, "max_blob_bytes": args.max_blob_bytes}
    backend_kwargs = {k: v for k, v in settings.items() if v is not None}
    kwargs = {"backend_kwargs": backend_kwargs} if backend_kwargs else {}
    start = time.perf_counter()
    env = gym.make(args.env, **kwargs)
    emit({"figure": "make", "seconds": time.perf_counter() - start, "imports_s": imports})
    rng = np.random.default_rng(args.seed)
    env.reset(seed=args.seed)
    for i, action in enumerate(unseen_actions(env.action_space.nvec, rng, args.steps)):
        env.reset()
        start = time.perf_counter()
        _, _, _, _, info = env.step(action)
        emit(
            {
                "figure": "step",
                "index": i,
                "seconds": time.perf_counter() - start,
                "latency": info.get("latency"),
                "rel_ci": info.get("latency_rel_ci"),
                "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "pss_mb": pss_mb(),
            }
        )
    emit({"figure": "peak_rss", "mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    env.close()


if __name__ == "__main__":
    main()
