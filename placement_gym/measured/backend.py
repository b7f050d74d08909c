"""The measured backend: run a placement on OpenVINO for real and time it.

Three executors run a placement (see their modules for what each can and cannot measure):

* ``"partitioned"`` (default, :mod:`placement_gym.measured.dataflow`): one compiled model per
  same-device segment, run as a dataflow graph, segments on different devices concurrently; a never-seen
  placement compiles its new segments first (seconds for BERT).
* ``"pieces"`` (:mod:`placement_gym.measured.pieces`): every group compiled once per device
  configuration, a placement run as the dataflow graph of its groups' pieces: a never-seen placement
  compiles nothing once every piece is compiled.
* ``"hetero"`` (:mod:`placement_gym.measured.hetero`): OpenVINO's HETERO plugin with per-op ``affinity``
  (HSDAG's way). It runs devices one after another and cannot tell apart virtual devices on one
  physical device.

Timing follows :mod:`placement_gym.measured.timing`: warm-up, then timed runs until the 95% confidence
interval of the median is within ``rel_ci`` (default +-2%) of it, at least ``repeats`` (6) and at most
``max_repeats`` runs within ``time_budget`` seconds. The warm-up runs are made only when the placement uses
a compiled model that has not run before: once every compiled segment has run, its memory is allocated and
further warm-up would only re-measure. With ``reference="host"`` every evaluation interleaves runs of the
all-on-host placement with the candidate's and reports the median ratio times the reference's latency,
measured once when first needed (:attr:`MeasuredBackend.reference_level`): drift of the machine's speed
between evaluations cancels. Each result carries the half-width of its confidence interval (``ci``) and the
host's load average (``host_load``).

Results are cached per placement (:mod:`placement_gym.backends.result_cache`), under a key that holds the
model's content hash and every protocol setting, each line with a checksum. Compile failures are
cached as infeasible (they recur); runtime errors, timeouts and non-finite timings are returned as
infeasible but never cached, so a transient failure does not stick to a placement.

Example:
    >>> from placement_gym.benchmarks import load_benchmark
    >>> from placement_gym.platforms import load_platform
    >>> bench = load_benchmark("tiny_cnn")
    >>> graph = bench.coarsen("fused")
    >>> backend = MeasuredBackend(bench, graph, load_platform("local"), repeats=6, max_repeats=30)
    >>> result = backend.evaluate([0] * graph.num_groups)
    >>> result.feasible, 6 <= result.samples <= 30, backend.evaluate([0] * graph.num_groups).cached
    (True, True, True)
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Sequence
from numbers import Real
from typing import Any

import numpy as np
import openvino as ov

from placement_gym.backends.base import LatencyBackend, LatencyResult
from placement_gym.backends.result_cache import ResultCache, check_cache_path
from placement_gym.benchmarks import Benchmark
from placement_gym.coarsening import CoarseGraph
from placement_gym.errors import BackendError, UnknownNameError
from placement_gym.measured.dataflow import DRIVERS, PartitionedExecutor, worker_cores
from placement_gym.measured.executor import ExecutionFailure, Executor, device_available, first_line
from placement_gym.measured.hetero import HeteroExecutor
from placement_gym.measured.pieces import MAX_PIECE_BYTES, PieceExecutor
from placement_gym.measured.timing import Timing, measure
from placement_gym.platforms import Platform
from placement_gym.zoo.loading import core, random_inputs

EXECUTORS = ("partitioned", "pieces", "hetero")
#: Default bound on the estimated bytes of the partitioned executor's compiled segments (see
#: :meth:`~placement_gym.measured.dataflow.PartitionedExecutor.estimate`, about 1.4 times what they take):
#: BERT's steps then stay within 1.5 GB of peak RSS (docs/performance.md).
MAX_COMPILED_BYTES = 896 << 20
#: Reference placements for drift correction: none, or everything on the platform's host device.
REFERENCES = (None, "host")


class MeasuredBackend(LatencyBackend):
    """Latency of a placement measured by running the model on OpenVINO.

    Args:
        benchmark: The model; its ``ov.Model`` is run with inputs from
            :func:`~placement_gym.zoo.loading.random_inputs` ``(model, seed)``.
        graph: The coarse graph whose groups are placed.
        platform: The devices, each with its OpenVINO device string and compile properties.
        executor: ``"partitioned"``, ``"pieces"`` or ``"hetero"``.
        driver: Partitioned and piecewise executors: how segments are started, ``"queue"`` or
            ``"threads"``; None: ``"threads"`` for ``"pieces"``, else ``"queue"`` (see
            :class:`~placement_gym.measured.dataflow.PartitionedExecutor`; workers are pinned to distinct
            CPUs by :func:`~placement_gym.measured.dataflow.worker_cores`).
        warmup: Untimed runs before timing a placement that uses a not-yet-run compiled model.
        repeats: Timed runs per evaluation: the minimum with ``rel_ci`` (made whatever the time budget;
            6 is the fewest whose median interval reaches 95%), the exact count without it (fewer if the
            time budget runs out; at least one).
        max_repeats: Most timed runs per evaluation with ``rel_ci`` (raised to ``repeats`` if lower).
        rel_ci: Target half-width of the 95% confidence interval of the median, relative to it; None
            makes exactly ``repeats`` runs.
        reference: ``"host"`` to correct drift against the all-on-host placement (see the module
            docstring; doubles the timed runs), or None.
        time_budget: Seconds per evaluation (warm-up and timed runs, not compilation) after which no
            further timed run starts.
        cache_size: Results kept in memory (LRU); 0 disables the result cache.
        cache_path: JSON-lines file that persists results across processes, or None. A path that is a
            directory, or whose parent is a file, is refused here rather than failing during ``evaluate``.
        seed: Seed of the model inputs.
        max_compiled_ops: Partitioned executor: compiled segments kept, counted in ops (default: no bound
            in ops; ``max_compiled_bytes`` bounds them).
        max_compiled_bytes: Partitioned executor: compiled segments kept, bounded by their estimated
            bytes (weights, written tensors and a fixed overhead each; default
            :data:`MAX_COMPILED_BYTES`). The two virtual CPUs of the ``local`` platform share compiled
            segments (they compile identically), so a segment compiled for one serves the other.
        max_pieces: Piecewise executor: compiled pieces kept (default: every group on every device
            configuration).
        max_piece_bytes: Piecewise executor: bound on the estimated bytes of the kept pieces (weights plus
            written tensors; default 2 GiB).
        run_timeout: Seconds after which one inference counts as hung (infeasible, not cached).
        compile_threads: Partitioned executor: threads that compile a placement's new segments at once
            (default: the CPUs this process may run on; see
            :class:`~placement_gym.measured.dataflow.PartitionedExecutor`). It changes how long preparing a
            placement takes, not what is compiled or measured, so results do not record it.
        max_blob_bytes: Partitioned executor, models read from an IR file: bound on the bytes of the kept
            weightless blobs of compiled segments, from which a segment evicted from the compiled-segment
            cache is imported instead of compiled again (:mod:`~placement_gym.measured.blobs`, e.g.
            :data:`~placement_gym.measured.blobs.MAX_BLOB_BYTES`). Default 0: no blobs, every such segment
            is compiled again (imported segments raise the process's RSS, see the module). Imported and
            compiled segments are the same compiled model, so results do not record it either.

    Raises:
        UnknownNameError: For an unknown ``executor``.
        BackendError: For invalid protocol settings (wrong types, non-finite or non-positive times, a
            ``cache_path`` that cannot be a file) or a model the executor cannot split.
    """

    name = "measured"
    deterministic = False

    def __init__(
        self,
        benchmark: Benchmark,
        graph: CoarseGraph,
        platform: Platform,
        *,
        executor: str = "partitioned",
        driver: str | None = None,
        warmup: int = 2,
        repeats: int = 6,
        max_repeats: int = 30,
        rel_ci: float | None = 0.02,
        reference: str | None = None,
        time_budget: float = 10.0,
        cache_size: int = 4096,
        cache_path: str | None = None,
        seed: int = 0,
        max_compiled_ops: int | None = None,
        max_compiled_bytes: int | None = MAX_COMPILED_BYTES,
        max_pieces: int | None = None,
        max_piece_bytes: int = MAX_PIECE_BYTES,
        run_timeout: float = 600.0,
        compile_threads: int | None = None,
        max_blob_bytes: int = 0,
    ) -> None:
        super().__init__(benchmark, graph, platform)
        if executor not in EXECUTORS:
            raise UnknownNameError("executor", executor, EXECUTORS)
        if driver is None:
            driver = "threads" if executor == "pieces" else "queue"
        if driver not in DRIVERS:
            raise UnknownNameError("driver", str(driver), DRIVERS)
        _check_int("warmup", warmup, 0)
        _check_int("repeats", repeats, 1)
        _check_int("max_repeats", max_repeats, 1)
        if rel_ci is not None and (
            isinstance(rel_ci, bool) or not isinstance(rel_ci, Real) or not 0 < rel_ci < 1
        ):
            raise BackendError(f"rel_ci must be a fraction in (0, 1) or None, got {rel_ci!r}")
        if reference not in REFERENCES:
            raise UnknownNameError("reference", str(reference), [str(r) for r in REFERENCES])
        _check_int("cache_size", cache_size, 0)
        _check_int("seed", seed, 0)
        if max_compiled_ops is not None:
            _check_int("max_compiled_ops", max_compiled_ops, 1)
        if max_compiled_bytes is not None:
            _check_int("max_compiled_bytes", max_compiled_bytes, 1)
        if max_pieces is not None:
            _check_int("max_pieces", max_pieces, 1)
        _check_int("max_piece_bytes", max_piece_bytes, 1)
        if compile_threads is not None:
            _check_int("compile_threads", compile_threads, 1)
        _check_int("max_blob_bytes", max_blob_bytes, 0)
        _check_seconds("time_budget", time_budget)
        _check_seconds("run_timeout", run_timeout)
        check_cache_path(cache_path)  # before the expensive work below
        self.warmup, self.repeats, self.time_budget, self.seed = warmup, repeats, float(time_budget), seed
        self.max_repeats = max(max_repeats, repeats)
        self.rel_ci = None if rel_ci is None else float(rel_ci)
        self.reference = reference
        #: Latency of the reference placement (seconds), measured when first needed; None without one.
        self.reference_level: float | None = None
        self._reference_plan: Any = None
        self.core = core()
        available = list(self.core.available_devices)
        self._missing = {
            i: f"device {d.name!r} needs OpenVINO device {d.ov_device!r}, which this machine lacks "
            f"(available: {', '.join(available)})"
            for i, d in enumerate(platform.devices)
            if not device_available(d, available)
        }
        model = benchmark.model
        inputs = random_inputs(model, seed)
        self.executor: Executor
        if executor == "hetero":
            self.executor = HeteroExecutor(
                model, benchmark.ops, platform, self.core, inputs, run_timeout=float(run_timeout)
            )
        elif executor == "pieces":
            self.executor = PieceExecutor(
                model,
                benchmark.ops,
                platform,
                self.core,
                inputs,
                groups=graph.assignment,
                max_pieces=max_pieces,
                max_piece_bytes=max_piece_bytes,
                run_timeout=float(run_timeout),
                driver=driver,
                cores=worker_cores(platform) if driver == "threads" else None,
            )
        else:
            self.executor = PartitionedExecutor(
                model,
                benchmark.ops,
                platform,
                self.core,
                inputs,
                max_compiled_ops=max_compiled_ops,
                max_compiled_bytes=max_compiled_bytes,
                run_timeout=float(run_timeout),
                driver=driver,
                cores=worker_cores(platform) if driver == "threads" else None,
                compile_threads=compile_threads,
                weights=benchmark.ir_weights,
                max_blob_bytes=max_blob_bytes,
            )
        self.config = self._config(executor)
        if executor == "pieces" or driver != "queue":  # absent: the queue driver (older caches)
            self.config["driver"] = driver
        if platform.cores and len(platform.cores) < (os.cpu_count() or 1):
            # a platform built on part of the machine (a pinned worker, taskset) times other runs than
            # the whole machine's (absent: all cores, as in older caches)
            self.config["cores"] = len(platform.cores)
        self.results = ResultCache(
            cache_size, self.config, cache_path, width=graph.num_groups, num_devices=platform.num_devices
        )
        #: Timing details of the last measured (uncached, feasible) evaluation.
        self.last_timing: Timing | None = None

    def _config(self, executor: str) -> dict[str, Any]:
        """What a result depends on; recorded with persisted results."""
        ops = self.graph.ops
        return {
            "benchmark": self.benchmark.name,
            "benchmark_version": self.benchmark.version,
            "model_sha256": self.benchmark.content_sha256,  # a file replaced at the same path is new
            "ops": ops.num_nodes,
            "coarsening": self.graph.level,
            "assignment": _digest(self.graph.assignment),
            "platform": self.platform.name,
            "devices": [
                {"name": d.name, "ov_device": d.ov_device, "compile_config": d.compile_config()}
                for d in self.platform.devices
            ],
            "executor": executor,
            "warmup": self.warmup,
            "repeats": self.repeats,
            "max_repeats": self.max_repeats,
            "rel_ci": self.rel_ci,
            "estimator": "median",
            "reference": self.reference,
            "time_budget": self.time_budget,
            "seed": self.seed,
            "openvino": ov.get_version(),
        }

    def evaluate(self, placement: Sequence[int] | np.ndarray) -> LatencyResult:
        """Measured latency of ``placement`` (shape ``(G,)``); cached results come back with ``cached``.

        Raises:
            PlacementError: Wrong shape, dtype or a device index out of range.
        """
        arr = self.validate(placement)
        hit = self.results.get(arr.tobytes())
        if hit is not None:
            return hit
        result, cacheable = self._measure(arr)
        if cacheable:
            self.results.put(arr, result)
        return result

    def _measure(self, placement: np.ndarray) -> tuple[LatencyResult, bool]:
        """Measure one placement; returns the result and whether it may be cached."""
        self.last_timing = None
        missing = [self._missing[d] for d in np.unique(placement).tolist() if d in self._missing]
        if missing:
            return LatencyResult.infeasible(missing[0]), False
        op_device = self.graph.expand(placement)
        try:
            plan = self.executor.prepare(op_device)
        except ExecutionFailure as exc:
            return LatencyResult.infeasible(exc.reason), exc.cacheable
        except Exception as exc:  # unexpected, so possibly transient: not cached
            return LatencyResult.infeasible(f"preparing the placement failed: {first_line(exc)}"), False
        warmup = 0 if self.executor.is_warm(plan) else self.warmup
        try:
            reference = self._reference_run()
            timing = measure(
                lambda: self.executor.run(plan),
                warmup=warmup,
                repeats=self.repeats,
                max_repeats=self.max_repeats,
                rel_ci=self.rel_ci,
                time_budget=self.time_budget,
                reference=reference,
                reference_level=self.reference_level,
            )
        except ExecutionFailure as exc:
            return LatencyResult.infeasible(exc.reason), False
        except Exception as exc:
            return LatencyResult.infeasible(f"running the placement failed: {first_line(exc)}"), False
        if not timing.finite or not np.isfinite(timing.estimate):
            return LatencyResult.infeasible(f"non-finite run time among {timing.times}"), False
        self.last_timing = timing
        result = LatencyResult(
            latency=timing.estimate,
            spread=timing.iqr,
            samples=timing.samples,
            ci=timing.ci_half_width,
            host_load=os.getloadavg()[0],
        )
        return result, True

    def _reference_run(self) -> Callable[[], float] | None:
        """One run of the reference placement, its plan compiled and its level measured on first use.

        Raises:
            ExecutionFailure: If the reference itself cannot run (then no placement can be corrected).
        """
        if self.reference is None:
            return None
        if self._reference_plan is None:
            host = np.full(self.graph.num_groups, self.platform.host, dtype=np.int64)
            self._reference_plan = self.executor.prepare(self.graph.expand(host))
            level = measure(
                lambda: self.executor.run(self._reference_plan),
                warmup=self.warmup,
                repeats=self.max_repeats,
                time_budget=self.time_budget * 3,
            )
            self.reference_level = level.median
        plan = self._reference_plan
        return lambda: self.executor.run(plan)

    def infer(self, placement: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        """Run ``placement`` once and return the model outputs (to check it computes the right thing).

        Returns:
            One array per model output, in ``model.outputs`` order.

        Raises:
            PlacementError: For a malformed placement.
            BackendError: If the placement cannot be compiled or run here.
        """
        arr = self.validate(placement)
        missing = [self._missing[d] for d in np.unique(arr).tolist() if d in self._missing]
        if missing:
            raise BackendError(missing[0])
        plan = self.executor.prepare(self.graph.expand(arr))
        self.executor.run(plan)
        return self.executor.outputs(plan)

    def close(self) -> None:
        self.executor.close()


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise BackendError(f"{name} must be an integer >= {low}, got {value!r}")


def _check_seconds(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not (math.isfinite(value) and value > 0):
        raise BackendError(f"{name} must be a finite number of seconds > 0, got {value!r}")


def _digest(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr, dtype=np.int64).tobytes()).hexdigest()[:16]
