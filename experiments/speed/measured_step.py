"""Where a measured env's step goes: per never-seen random placement, the time spent splitting it into
segments, building the segments' models, compiling them, wiring them, and in warm-up and timed runs.

Runs ``--steps N`` one-shot episodes of ``--env`` with uniformly random, never-seen placements (the
placements of :mod:`experiments.speed.measured_env` with the same ``--seed``) and wraps the partitioned
executor's phases in timers. Per step one JSON line: the phases' seconds, the number of segments, how many
were compiled (``new``) and how many came from the compiled-segment cache (``hits``), the timed runs and
the load average; the last line averages them over the steps. (``compile_total`` is compiling and wiring,
``compile_model`` the part of it in OpenVINO's ``compile_model``; the first step also measures the env's
single-device baselines.)

Usage:
    python -m experiments.speed.measured_step --env DevicePlacement-bert-local-measured-v1 --steps 20 --out runs/step_profile.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from experiments.speed.measured_env import unseen_actions


def _timed(totals: dict[str, float], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] += time.perf_counter() - start

    return wrapper


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="DevicePlacement-bert-local-measured-v1")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import gymnasium as gym
    import numpy as np

    import placement_gym  # noqa: F401  (registers the IDs)

    out = open(args.out, "a") if args.out else None

    def emit(row: dict) -> None:
        row.update(env=args.env, load=os.getloadavg()[0])
        line = json.dumps(row)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    env = gym.make(args.env)
    backend = env.unwrapped.problem.backend
    executor = backend.executor
    phase: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    executor.core = _CoreProxy(executor.core, phase)
    executor.segments = _timed(phase, "split", executor.segments)
    executor.index.build = _timed(phase, "build", executor.index.build)
    if hasattr(executor.index, "build_many"):  # one clone for a placement's new segments
        executor.index.build_many = _timed(phase, "build", executor.index.build_many)
    original_compile = executor._compile

    def counting_compile(segment: Any, *rest: Any) -> Any:
        key = segment.cache_key
        counts["segments"] += 1
        counts["hits" if key in executor._compiled else "new"] += 1
        start = time.perf_counter()
        try:
            return original_compile(segment, *rest)
        finally:
            phase["compile_total"] += time.perf_counter() - start

    executor._compile = counting_compile
    original_run = executor.run

    def counting_run(plan: Any) -> float:
        elapsed = original_run(plan)
        phase["reference_runs" if plan is backend._reference_plan else "runs"] += elapsed
        counts["runs"] += 1
        return elapsed

    executor.run = counting_run

    rng = np.random.default_rng(args.seed)
    env.reset(seed=args.seed)
    totals: dict[str, float] = defaultdict(float)
    for i, action in enumerate(unseen_actions(env.action_space.nvec, rng, args.steps)):
        env.reset()
        phase.clear()
        counts.clear()
        start = time.perf_counter()
        _, _, _, _, info = env.step(action)
        row: dict[str, Any] = {"index": i, "step_s": time.perf_counter() - start}
        row.update({k: round(v, 4) for k, v in phase.items()})
        row.update(counts)
        timing = backend.last_timing
        if timing is not None:  # the runs that are not timed are warm-up runs
            row.update(timed_runs=round(sum(timing.times), 4), samples=timing.samples)
            row["warmup_runs"] = round(phase["runs"] - sum(timing.times), 4)
        row.update(latency=info.get("latency"), rel_ci=info.get("latency_rel_ci"))
        if not np.isfinite(row["latency"] or np.inf):
            row["reason"] = info.get("reason")
        emit(row)
        for k, v in row.items():
            if isinstance(v, (int, float)) and k not in ("index", "latency", "rel_ci"):
                totals[k] += v
    if args.steps:
        emit({"summary": True, "steps": args.steps, **{k: round(v / args.steps, 4) for k, v in totals.items()}})
    env.close()


class _CoreProxy:
    """An ``ov.Core`` whose ``compile_model`` is timed (everything else passes through)."""

    def __init__(self, core: Any, totals: dict[str, float]) -> None:
        self._core, self._totals = core, totals

    def compile_model(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return self._core.compile_model(*args, **kwargs)
        finally:
            self._totals["compile_model"] += time.perf_counter() - start

    def __getattr__(self, name: str) -> Any:
        return getattr(self._core, name)


if __name__ == "__main__":
    main()
