"""Where a measured env's step goes: per never-seen random placement, the time spent turning it into
segments, making room in the compiled-segment cache, building the segments' models, compiling and wiring
them, in warm-up and timed runs, and in the rest of the step (the timing protocol's and the env's own
bookkeeping).

Runs ``--steps N`` one-shot episodes of ``--env`` with uniformly random, never-seen placements (the
placements of :mod:`experiments.speed.measured_env` with the same ``--seed``) and wraps the partitioned
executor's phases in timers. Per step one JSON line:

* ``split`` (the placement into segments), ``evict`` (room made in the compiled-segment cache, evicted
  segments released), ``build`` (the new segments' models), ``compile_model`` and ``import_model``
  (OpenVINO's, summed over the segments: with several compile threads they exceed their share of
  ``compile``, the wall time of compiling or importing the placement's new segments), ``wire`` (infer
  requests and their tensors), ``prepare`` (all of these, wall time);
* ``warmup_runs`` and ``warmup_each`` (the untimed runs; ``warmup<i>_ratio``: the i-th over the timed runs'
  median), ``timed_runs``, ``timed_each`` and ``samples``, ``protocol``
  (the timing loop around the runs: its statistics after every run), ``other`` (the step's remaining
  wall time: the env's observation and info, the result cache);
* ``gc`` and ``gc_in_runs`` (Python's garbage collections during the step, and the part of them during
  runs; ``collections``: how many);
* the number of segments, how many were not in the compiled-segment cache (``new``; ``imported`` of them
  from their blobs) and how many were (``hits``), the latency, its relative 95% interval and the load
  average.

The last line averages them over the steps (the warm-up ratios over the steps after the first, which also
measures the env's single-device baselines). ``--compile-threads``, ``--warmup`` and ``--max-blob-bytes`` pass those backend settings
(default: the env's own, which keeps no blobs: ``--max-blob-bytes 67108864`` imports the segments compiled
before from their blobs).

Usage:
    python -m experiments.speed.measured_step --env DevicePlacement-bert-local-measured-v1 --steps 20 --out runs/step_profile.jsonl
"""

from __future__ import annotations

import gc
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from experiments.speed.measured_env import row_writer, step_parser, unseen_actions


class _Clock:
    """Seconds per phase, added from any thread."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self.totals[name] += seconds

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - start)

        return wrapper


def main(argv: list[str] | None = None) -> None:
    parser = step_parser(__doc__, steps=20)
    parser.add_argument("--compile-threads", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--max-blob-bytes", type=int, default=None)
    args = parser.parse_args(argv)

    import gymnasium as gym
    import numpy as np

    import placement_gym  # noqa: F401  (registers the IDs)
    import placement_gym.measured.backend as backend_module

    emit = row_writer(args.out, env=args.env)

    settings = {"compile_threads": args.compile_threads, "warmup": args.warmup, "max_blob_bytes": args.max_blob_bytes}
    kwargs = {k: v for k, v in settings.items() if v is not None}
    env = gym.make(args.env, **({"backend_kwargs": kwargs} if kwargs else {}))
    backend = env.unwrapped.problem.backend
    executor = backend.executor
    clock = _Clock()
    phase = clock.totals
    counts: dict[str, int] = defaultdict(int)
    executor.core = _CoreProxy(executor.core, clock)
    executor.prepare = clock.wrap("prepare", executor.prepare)
    executor.segments = clock.wrap("split", executor.segments)
    executor._make_room = clock.wrap("evict", executor._make_room)
    executor.index.build = clock.wrap("build", executor.index.build)
    executor.index.build_many = clock.wrap("build", executor.index.build_many)
    compiler = executor.compiler
    compiler.compile = clock.wrap("compile", compiler.compile)
    original_compile = executor._compile

    def counting_compile(segment: Any, *rest: Any) -> Any:
        counts["segments"] += 1
        counts["hits" if segment.cache_key in executor._compiled else "new"] += 1
        return clock.wrap("wire", original_compile)(segment, *rest)

    executor._compile = counting_compile
    original_run = executor.run
    runs: list[float] = []
    in_run = {"now": False, "gc_start": 0.0}

    def on_gc(stage: str, info: dict) -> None:
        if stage == "start":
            in_run["gc_start"] = time.perf_counter()
            return
        took = time.perf_counter() - in_run["gc_start"]
        clock.add("gc", took)
        if in_run["now"]:
            clock.add("gc_in_runs", took)
        counts[f"collections_gen{info['generation']}"] += 1

    gc.callbacks.append(on_gc)

    def counting_run(plan: Any) -> float:
        in_run["now"] = True
        try:
            elapsed = original_run(plan)
        finally:
            in_run["now"] = False
        if plan is backend._reference_plan:
            clock.add("reference_runs", elapsed)
        else:
            clock.add("runs", elapsed)
            runs.append(elapsed)
        return elapsed

    executor.run = counting_run
    backend_module.measure = clock.wrap("measure", backend_module.measure)

    rng = np.random.default_rng(args.seed)
    env.reset(seed=args.seed)
    totals: dict[str, float] = defaultdict(float)
    present: dict[str, int] = defaultdict(int)
    for i, action in enumerate(unseen_actions(env.action_space.nvec, rng, args.steps)):
        env.reset()
        phase.clear()
        counts.clear()
        runs.clear()
        imported = compiler.stats["imported"]
        start = time.perf_counter()
        _, _, _, _, info = env.step(action)
        step = time.perf_counter() - start
        row: dict[str, Any] = {"index": i, "step_s": round(step, 4)}
        row.update({k: round(v, 4) for k, v in phase.items() if k != "measure"})
        row.update(counts)
        row["imported"] = compiler.stats["imported"] - imported
        timing = backend.last_timing
        if timing is not None:  # the runs that are not timed are warm-up runs
            warmups = runs[: len(runs) - timing.samples]
            row.update(timed_runs=round(sum(timing.times), 4), samples=timing.samples, stop=timing.stop)
            row.update(warmup_runs=round(sum(warmups), 4), warmup_each=[round(t, 4) for t in warmups])
            row["timed_each"] = [round(t, 4) for t in timing.times]
            for k, t in enumerate(warmups[:2] if i else []):  # the first step's include the baselines'
                row[f"warmup{k + 1}_ratio"] = round(t / timing.median, 4)
            row["protocol"] = round(phase["measure"] - phase["runs"] - phase["reference_runs"], 4)
        row["other"] = round(step - phase["prepare"] - phase["measure"], 4)
        row.update(latency=info.get("latency"), rel_ci=info.get("latency_rel_ci"))
        if not np.isfinite(row["latency"] or np.inf):
            row["reason"] = info.get("reason")
        emit(row)
        for k, v in row.items():
            if isinstance(v, (int, float)) and k not in ("index", "latency", "rel_ci"):
                totals[k] += v
                present[k] += 1
    if args.steps:
        # a phase absent from a step took no time in it; a ratio absent from a step is not there to average
        means = {k: round(v / (present[k] if k.endswith("_ratio") else args.steps), 4) for k, v in totals.items()}
        emit({"summary": True, "steps": args.steps, **means})
    env.close()


class _CoreProxy:
    """An ``ov.Core`` whose ``compile_model`` and ``import_model`` are timed (everything else passes
    through)."""

    def __init__(self, core: Any, clock: _Clock) -> None:
        self._core, self._clock = core, clock

    def compile_model(self, *args: Any, **kwargs: Any) -> Any:
        return self._clock.wrap("compile_model", self._core.compile_model)(*args, **kwargs)

    def import_model(self, *args: Any, **kwargs: Any) -> Any:
        return self._clock.wrap("import_model", self._core.import_model)(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._core, name)


if __name__ == "__main__":
    main()
