"""The project's own executor: one compiled model per same-device segment, run as a dataflow graph.

A per-op placement is split into segments (:func:`~placement_gym.measured.segments.split_segments`);
each segment is built as its own ``ov.Model`` and compiled on its device with
``device.compile_config()``. One inference starts every segment whose inputs are ready; a device runs one
segment at a time (a device is one serial resource, e.g. one 1-thread virtual CPU), while segments on
different devices run concurrently. Two drivers start them (:data:`DRIVERS`): by default ``start_async``
and a queue of completions the calling thread reads; or one pinned worker thread per device.

Tensors are not copied between segments: every source key (see :mod:`~placement_gym.measured.segments`)
has one ``ov.Tensor`` while a kept compiled segment reads or writes it, set as the producer's output
tensor and as every consumer's input tensor (the model's inputs and outputs keep theirs for the executor's
lifetime). Because a segment's inputs and outputs depend only on its op set, a compiled segment is wired
once and reused, unchanged, by every placement that contains it.

Compiled segments are cached, keyed by op set and device configuration (devices that compile identically,
such as the ``local`` platform's two virtual CPUs, share them), up to a bound in estimated bytes and/or
ops with size-aware eviction (GreedyDual-Size, see :meth:`PartitionedExecutor._make_room`), so similar
placements recompile only the segments that changed and the short segments that recur across random
placements are compiled once. A segment that failed to compile is remembered. A placement's new segments
are compiled on several threads when the process may run on several CPUs, and a segment compiled before
is imported from its weightless blob instead of compiled again
(:class:`~placement_gym.measured.compiling.SegmentCompiler`).
"""

from __future__ import annotations

import heapq
import os
import queue
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import openvino as ov

from placement_gym.errors import UnknownNameError
from placement_gym.graph import CompGraph
from placement_gym.measured.blobs import MAX_BLOB_BYTES, SegmentBlobs
from placement_gym.measured.compiling import SegmentCompiler, default_compile_threads
from placement_gym.measured.executor import MAX_FAILED, ExecutionFailure, Executor, first_line, timed_infer
from placement_gym.measured.segments import Key, ModelIndex, Segment, param_key, split_segments
from placement_gym.platforms.devices import Platform


@dataclass(eq=False)
class _Compiled:
    """A compiled segment with its wired infer request."""

    segment: Segment
    request: ov.InferRequest
    runs: int = 0


#: Estimated bytes a compiled segment holds besides its weights and written tensors (its compiled model and
#: infer request; about 0.5-1 MiB measured on BERT's segments with the CPU plugin).
COMPILED_OVERHEAD = 1 << 20

#: Who starts ready segments during a run (see :class:`PartitionedExecutor`).
DRIVERS = ("queue", "threads")


@dataclass(eq=False)
class Plan:
    """A placement ready to run.

    Attributes:
        parts: Compiled segments in a topological order.
        deps: ``deps[i]``: indices (into ``parts``) of the segments that ``parts[i]`` reads from.
        users: ``users[i]``: indices of the segments that read from ``parts[i]``.
        devices: ``devices[i]``: the device ``parts[i]`` runs on (a compiled piece may serve several
            devices of identical configuration, see :mod:`~placement_gym.measured.pieces`); left out,
            each part runs on its own segment's device.
    """

    parts: list[_Compiled]
    deps: list[list[int]]
    users: list[list[int]] = field(default_factory=list)
    devices: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.devices:
            self.devices = [p.segment.device for p in self.parts]
        if len(self.devices) != len(self.parts):
            raise ValueError(f"Plan: {len(self.devices)} devices given for {len(self.parts)} parts")


class _Workers:
    """One thread per device that runs the device's segments with a blocking ``infer`` (the CPU plugin
    computes a 1-thread model on the calling thread, so a pinned worker pins the device's work).

    A finished segment makes its readers ready on their devices' workers (one thread handoff per segment
    whose reader is on another device, none along a same-device chain); ready segments of a device run
    lowest index (topological order) first.
    """

    def __init__(self, num_devices: int, cores: dict[int, int]) -> None:
        self.lock = threading.Lock()
        self.wake = [threading.Condition(self.lock) for _ in range(num_devices)]
        self.idle = threading.Condition(self.lock)  # notified when no segment of an earlier run is running
        self.run_state: _ThreadRun | None = None
        self.stopping = False
        self.threads = [
            threading.Thread(target=self._work, args=(d, cores.get(d)), daemon=True, name=f"device-{d}")
            for d in range(num_devices)
        ]
        for t in self.threads:
            t.start()

    def run(self, plan: Plan, timeout: float) -> float:
        """Run ``plan`` once; its wall time in seconds.

        Raises:
            ExecutionFailure: If a segment fails, or the run does not finish within ``timeout`` seconds
                (running segments are cancelled; not cacheable).
        """
        run = _ThreadRun(plan)
        with self.lock:
            # a failed or timed-out run may still be finishing a segment on another device
            previous = self.run_state
            if previous is not None and not self.idle.wait_for(lambda: not previous.busy, timeout):
                raise ExecutionFailure(
                    f"a device is still busy with an abandoned run after {timeout:g} s", cacheable=False
                )
            self.run_state = run
            run.start = time.perf_counter()
            for d in run.ready:
                self.wake[d].notify()
        if not run.done.wait(timeout):
            with self.lock:
                run.abandoned = True
                busy = list(run.busy.values())
            for i in busy:
                try:
                    plan.parts[i].request.cancel()
                except Exception:  # cancelling an idle or failed request raises; nothing to do
                    pass
            raise ExecutionFailure(f"inference did not finish within {timeout:g} s", cacheable=False)
        if run.error is not None:
            raise ExecutionFailure(f"inference failed: {first_line(run.error)}", cacheable=False)
        return run.end - run.start

    def _work(self, device: int, cpu: int | None) -> None:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})  # the calling thread only (Linux)
        with self.lock:
            while True:
                run = self.run_state
                while not self.stopping and (run is None or run.abandoned or not run.ready.get(device)):
                    self.wake[device].wait()
                    run = self.run_state
                if self.stopping:
                    return
                i = run.take(device)
                self.lock.release()
                try:
                    run.plan.parts[i].request.infer()
                    failed: BaseException | None = None
                except Exception as exc:
                    failed = exc
                finally:
                    self.lock.acquire()
                if run.abandoned or failed is not None:
                    del run.busy[device]
                    if failed is not None and not run.abandoned:
                        run.error, run.abandoned = failed, True
                        run.done.set()
                else:
                    for d in run.complete(i):
                        if d != device:
                            self.wake[d].notify()
                    if run.finished == len(run.plan.parts):
                        run.end = time.perf_counter()
                        run.done.set()
                if not run.busy:
                    self.idle.notify_all()

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            for w in self.wake:
                w.notify_all()


class _RunState:
    """Which parts of one run are waiting, ready or running, shared by both drivers: a device runs one part
    at a time, its ready parts lowest index (topological order) first."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.waiting = [len(d) for d in plan.deps]
        self.ready: dict[int, list[int]] = {}  # device -> heap of ready part indices
        self.busy: dict[int, int] = {}  # device -> running part index
        self.finished = 0
        for i, n in enumerate(self.waiting):
            if n == 0:
                self.ready.setdefault(plan.devices[i], []).append(i)

    def take(self, device: int) -> int | None:
        """The part ``device`` runs next, marked running; None if it is busy or has nothing ready."""
        heap = self.ready.get(device)
        if not heap or device in self.busy:
            return None
        i = self.busy[device] = heapq.heappop(heap)
        return i

    def complete(self, i: int) -> list[int]:
        """Part ``i`` finished: its device is free; returns the devices of the parts it made ready."""
        del self.busy[self.plan.devices[i]]
        self.finished += 1
        devices = []
        for u in self.plan.users[i]:
            self.waiting[u] -= 1
            if self.waiting[u] == 0:
                d = self.plan.devices[u]
                heapq.heappush(self.ready.setdefault(d, []), u)
                devices.append(d)
        return devices


class _ThreadRun(_RunState):
    """A run on :class:`_Workers` (guarded by their lock): the part states, times, outcome."""

    def __init__(self, plan: Plan) -> None:
        super().__init__(plan)
        self.start = self.end = 0.0
        self.abandoned = False
        self.error: BaseException | None = None
        self.done = threading.Event()


def device_classes(platform: Platform) -> list[int]:
    """Per device, the first device that OpenVINO compiles identically (same device string and config):
    such devices share compiled segments (the ``local`` platform's two virtual CPUs do)."""
    seen: dict[str, int] = {}
    classes = []
    for i, d in enumerate(platform.devices):
        key = repr((d.ov_device, sorted(d.compile_config().items())))
        classes.append(seen.setdefault(key, i))
    return classes


def worker_cores(platform: Platform) -> dict[int, int]:
    """The CPU each 1-thread CPU device's worker is pinned to: distinct CPUs this process may run on, in
    device order; empty (no pinning) if there are fewer such CPUs than devices."""
    single = [
        i
        for i, d in enumerate(platform.devices)
        if d.ov_device == "CPU" and str(d.ov_config.get("INFERENCE_NUM_THREADS")) == "1"
    ]
    cpus = sorted(os.sched_getaffinity(0))
    if not single or len(cpus) < len(single):
        return {}
    return dict(zip(single, cpus))


class PartitionedExecutor(Executor):
    """Runs placements as dataflow graphs of separately compiled segments.

    Args:
        model: The model to run (not modified).
        graph: Its op graph (node names are the model's op friendly names).
        platform: The devices; ``placement`` entries index ``platform.devices``.
        core: The OpenVINO core to compile with.
        inputs: Model inputs by input name (see :func:`~placement_gym.zoo.loading.random_inputs`).
        max_compiled_ops: Keep compiled segments with at most this many ops in total (LRU eviction);
            None: no bound in ops.
        max_compiled_bytes: Keep compiled segments whose estimated memory (:meth:`estimate`) totals at
            most this many bytes (LRU eviction; room for a placement's new segments is made before they
            are compiled); None: no bound in bytes. The segments of the placement being prepared are
            never evicted for it, so one placement larger than the bound is still compiled whole.
        run_timeout: Seconds after which one inference counts as hung.
        driver: How segments are started: ``"queue"`` (``start_async`` on OpenVINO's threads; each
            completion callback puts the segment on a queue, and the calling thread starts the segments
            it made ready: two thread handoffs per segment) or ``"threads"`` (one worker thread per
            device, pinned to the CPU given by ``cores``, runs its segments with a blocking ``infer``:
            no handoff along a same-device chain, one to another device's reader).
        cores: ``"threads"`` driver: the CPU each device's worker is pinned to (device index -> CPU id);
            devices not in it are not pinned.
        compile_threads: Threads that compile a placement's new segments at once (each segment is still
            one ``compile_model`` of its own model and configuration); None:
            :func:`~placement_gym.measured.compiling.default_compile_threads`, the CPUs this process may run
            on. 1 compiles them one after the other.
        weights: The IR weights file (``.bin``) the model was read from, or None. With it, every compiled
            segment is exported as a weightless blob (:mod:`~placement_gym.measured.blobs`) and imported
            from it when it is needed again after eviction, instead of compiled again.
        max_blob_bytes: Bound on the kept blobs' bytes (0: none kept).
    """

    name = "partitioned"

    def __init__(
        self,
        model: ov.Model,
        graph: CompGraph,
        platform: Platform,
        core: ov.Core,
        inputs: dict[str, np.ndarray],
        *,
        max_compiled_ops: int | None = None,
        max_compiled_bytes: int | None = None,
        run_timeout: float = 600.0,
        driver: str = "queue",
        cores: dict[int, int] | None = None,
        compile_threads: int | None = None,
        weights: str | Path | None = None,
        max_blob_bytes: int = MAX_BLOB_BYTES,
    ) -> None:
        if driver not in DRIVERS:
            raise UnknownNameError("driver", driver, DRIVERS)
        self.driver = driver
        self.cores = dict(cores or {})
        self._workers: _Workers | None = None
        self.index = ModelIndex(model, graph)
        self.graph = graph
        self.platform = platform
        self.classes = device_classes(platform)
        blobs = SegmentBlobs(weights, max_blob_bytes) if weights is not None and max_blob_bytes > 0 else None
        threads = default_compile_threads() if compile_threads is None else compile_threads
        #: Compiles (or imports) a placement's new segments.
        self.compiler = SegmentCompiler(core, platform, self.index, threads=threads, blobs=blobs)
        self.max_compiled_ops = max_compiled_ops
        self.max_compiled_bytes = max_compiled_bytes
        self._weight_bytes = np.asarray(graph.nodes["param_bytes"], dtype=np.int64)
        self._out_bytes = np.asarray(graph.nodes["out_bytes"], dtype=np.int64)
        self._sizes: dict[tuple[int, bytes], int] = {}
        # GreedyDual-Size priorities of the kept segments and the inflation value (see _make_room)
        self._priority: dict[tuple[int, bytes], float] = {}
        self._inflation = 0.0
        #: Estimated bytes of the kept compiled segments (:meth:`estimate`).
        self.compiled_bytes = 0
        #: Segments looked up by :meth:`prepare` (``lookups``) and how many were not in the cache
        #: (``compiled``: compiled or imported, see :attr:`SegmentCompiler.stats`).
        self.stats = {"lookups": 0, "compiled": 0}
        self.run_timeout = run_timeout
        self._tensors: dict[Key, ov.Tensor] = {}
        # kept compiled segments that read or write each key: a boundary tensor no kept segment uses is
        # released (over many random placements most of BERT's op outputs are cut at a boundary: 155 MB)
        self._users: dict[Key, int] = {}
        self._permanent = set(self.index.outputs)  # read by outputs(); the inputs are the Parameters'
        for i, port in enumerate(model.inputs):
            data = np.ascontiguousarray(inputs[port.get_any_name()])
            self._tensors[param_key(i)] = ov.Tensor(data, shared_memory=True)
        self._compiled: OrderedDict[tuple[int, bytes], _Compiled] = OrderedDict()
        self._compiled_ops = 0
        self._failed: OrderedDict[tuple[int, bytes], str] = OrderedDict()  # at most MAX_FAILED
        self._plans: OrderedDict[bytes, list[Segment]] = OrderedDict()
        self._done: queue.SimpleQueue = queue.SimpleQueue()

    @property
    def core(self) -> ov.Core:
        """The OpenVINO core segments are compiled with."""
        return self.compiler.core

    @core.setter
    def core(self, core: ov.Core) -> None:
        self.compiler.core = core

    # ------------------------------------------------------------------ preparing
    def segments(self, op_device: np.ndarray) -> list[Segment]:
        """The segments of per-op placement ``op_device`` (shape ``(n,)``), memoised for recent ones."""
        key = np.asarray(op_device, dtype=np.int64).tobytes()
        found = self._plans.get(key)
        if found is None:
            found = [self.index.segment(d, ops) for d, ops in split_segments(self.graph, op_device)]
            self._plans[key] = found
            if len(self._plans) > 256:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return found

    def prepare(self, op_device: np.ndarray) -> Plan:
        segments = self.segments(op_device)
        # devices that compile identically share one compiled segment: key it by the class's device
        shared = [s if self.classes[s.device] == s.device else replace(s, device=self.classes[s.device]) for s in segments]
        for s in shared:
            if s.cache_key in self._failed:
                raise ExecutionFailure(self._failed[s.cache_key], cacheable=True)
        new = [s for s in shared if s.cache_key not in self._compiled]
        for s in shared:
            if s.cache_key in self._priority:
                self._priority[s.cache_key] = self._inflation + 1.0 / self._sizes[s.cache_key]
        self.stats["lookups"] += len(shared)
        self.stats["compiled"] += len(new)
        self._make_room(sum(self.estimate(s) for s in new), keep={s.cache_key for s in shared})
        done = self.compiler.compile(new)
        for s in new:
            if isinstance(done[s.cache_key], Exception):
                self._fail(s, done[s.cache_key])
        parts = [self._compile(s, done.get(s.cache_key)) for s in shared]
        return self._plan(parts, [s.device for s in segments])

    def _fail(self, segment: Segment, exc: Exception) -> ExecutionFailure:
        """Remember that ``segment`` failed to compile with ``exc``; returns the (cacheable) failure."""
        device = self.platform.devices[segment.device]
        reason = (
            f"compiling a segment of {len(segment.ops)} ops on {device.name} ({device.ov_device}) "
            f"failed: {first_line(exc)}"
        )
        self._failed[segment.cache_key] = reason
        if len(self._failed) > MAX_FAILED:
            self._failed.popitem(last=False)
        return ExecutionFailure(reason, cacheable=True)

    def estimate(self, segment: Segment) -> int:
        """Estimated bytes a compiled, wired segment holds: the weights its ops read, the tensors they
        write (an upper bound of its intermediate buffers) and :data:`COMPILED_OVERHEAD`."""
        ops = list(segment.ops)
        return int(self._weight_bytes[ops].sum() + self._out_bytes[ops].sum()) + COMPILED_OVERHEAD

    def _plan(self, parts: list[_Compiled], devices: list[int]) -> Plan:
        """The plan of compiled ``parts`` (a topological order) run on ``devices``; evicts old entries."""
        segments = [p.segment for p in parts]
        producer = {key: i for i, s in enumerate(segments) for key in s.outputs}
        deps = [sorted({producer[k] for k in s.inputs if k in producer}) for s in segments]
        users: list[list[int]] = [[] for _ in segments]
        for i, ds in enumerate(deps):
            for d in ds:
                users[d].append(i)
        self._evict()
        return Plan(parts, deps, users, devices)

    def _compile(self, segment: Segment, compiled: ov.CompiledModel | Exception | None = None) -> _Compiled:
        """The compiled, wired ``segment`` from the cache, or wired from ``compiled`` (made by
        :attr:`compiler`), or compiled now."""
        key = segment.cache_key
        hit = self._compiled.get(key)
        if hit is not None:
            self._compiled.move_to_end(key)
            return hit
        device = self.platform.devices[segment.device]
        if key in self._failed:
            raise ExecutionFailure(self._failed[key], cacheable=True)
        if compiled is None:
            compiled = self.compiler.compile([segment])[key]
        if isinstance(compiled, Exception):
            raise self._fail(segment, compiled) from compiled
        request = compiled.create_infer_request()
        try:
            for i, k in enumerate(segment.inputs):
                request.set_input_tensor(i, self._tensor(k))
            for i, k in enumerate(segment.outputs):
                request.set_output_tensor(i, self._tensor(k))
        except Exception as exc:
            raise ExecutionFailure(
                f"wiring a segment on {device.name} failed: {first_line(exc)}", cacheable=True
            ) from exc
        request.set_callback(self._done.put, key)
        for k in {*segment.inputs, *segment.outputs}:
            self._users[k] = self._users.get(k, 0) + 1
        entry = _Compiled(segment, request)
        self._compiled[key] = entry
        self._compiled_ops += len(segment.ops)
        self._sizes[key] = size = self.estimate(segment)
        self._priority[key] = self._inflation + 1.0 / size
        self.compiled_bytes += size
        return entry

    def _tensor(self, key: Key) -> ov.Tensor:
        tensor = self._tensors.get(key)
        if tensor is None:
            etype, shape = self.index.specs[key]
            tensor = self._tensors[key] = ov.Tensor(etype, list(shape))
        return tensor

    def _evict(self) -> None:
        # plans hold references to their parts, so evicting never breaks a plan in use
        self._make_room(0, keep=set())

    def _over(self, extra: int) -> bool:
        """Whether the kept segments plus ``extra`` estimated bytes exceed a bound."""
        ops_over = self.max_compiled_ops is not None and self._compiled_ops > self.max_compiled_ops
        bytes_over = self.max_compiled_bytes is not None and self.compiled_bytes + extra > self.max_compiled_bytes
        return ops_over or bytes_over

    def _make_room(self, extra: int, keep: set[tuple[int, bytes]]) -> None:
        """Evict segments not in ``keep`` until ``extra`` more bytes fit the bounds (at least one is kept).

        The victim is the segment of lowest GreedyDual-Size priority (Cao and Irani, 1997): a segment's
        priority is the inflation value when it was last used plus one over its estimated bytes, and
        evicting a segment raises the inflation value to its priority. Compiling costs about the same
        whatever a segment's size, and short segments recur across random placements far more often than
        long ones, so among segments used equally recently the largest go first: more compiles saved per
        byte than least-recently-used eviction.
        """
        while self._over(extra) and len(self._compiled) > 1:
            victims = [(h, k) for k, h in self._priority.items() if k not in keep]
            if not victims:
                return
            priority, key = min(victims)
            self._inflation = priority
            self._drop(key)

    def _drop(self, key: tuple[int, bytes]) -> _Compiled:
        """Remove ``key`` from the compiled-segment cache, with its ops and bytes, and release the boundary
        tensors no kept segment reads or writes any more."""
        entry = self._compiled.pop(key)
        for k in {*entry.segment.inputs, *entry.segment.outputs}:
            self._users[k] -= 1
            if not self._users[k]:
                del self._users[k]
                if k[0] >= 0 and k not in self._permanent:
                    # a plan still holding the evicted segment keeps the tensor through its infer request;
                    # the segments wired later for this key share a new one
                    del self._tensors[k]
        self._compiled_ops -= len(entry.segment.ops)
        self.compiled_bytes -= self._sizes.pop(key)
        del self._priority[key]
        return entry

    def clear_compiled(self) -> None:
        """Drop every compiled segment from the cache (plans in use keep theirs; blobs are kept, so the
        segments are imported, not compiled, when needed again)."""
        for key in list(self._compiled):
            self._drop(key)

    @property
    def num_compiled(self) -> int:
        """Number of compiled segments in the cache."""
        return len(self._compiled)

    def is_warm(self, plan: Plan) -> bool:
        return all(p.runs > 0 for p in plan.parts)

    # ------------------------------------------------------------------ running
    def run(self, plan: Plan) -> float:
        parts = plan.parts
        if self.driver == "threads":
            if self._workers is None:
                self._workers = _Workers(self.platform.num_devices, self.cores)
                # an executor dropped without close() still stops its workers (they do not keep it alive)
                self._stop_workers = weakref.finalize(self, self._workers.stop)
            elapsed = self._workers.run(plan, self.run_timeout)
        elif len(parts) == 1:
            self._drain()  # the request's completion callback also fires here; keep the queue empty
            elapsed = timed_infer(parts[0].request, self.run_timeout)
        else:
            elapsed = self._run_dataflow(plan)
        for p in parts:
            p.runs += 1
        return elapsed

    def _run_dataflow(self, plan: Plan) -> float:
        parts = plan.parts
        position = {p.segment.cache_key: i for i, p in enumerate(parts)}
        state = _RunState(plan)

        def launch(device: int) -> None:
            i = state.take(device)
            if i is not None:
                parts[i].request.start_async()

        self._drain()
        start = time.perf_counter()
        deadline = start + self.run_timeout
        try:
            for device in list(state.ready):
                launch(device)
            while state.finished < len(parts):
                try:
                    key = self._done.get(timeout=min(1.0, max(deadline - time.perf_counter(), 0.001)))
                except queue.Empty:
                    self._check_running(parts, state.busy, deadline)
                    continue
                i = position[key]
                parts[i].request.wait()  # returns at once; raises if the inference failed
                for device in state.complete(i):
                    launch(device)
                launch(plan.devices[i])
            elapsed = time.perf_counter() - start
        except ExecutionFailure:
            self._abort(parts, state.busy)
            raise
        except Exception as exc:
            self._abort(parts, state.busy)
            raise ExecutionFailure(f"inference failed: {first_line(exc)}", cacheable=False) from exc
        return elapsed

    def _check_running(self, parts: list[_Compiled], busy: dict[int, int], deadline: float) -> None:
        """Surface failures whose completion callback never came, and hangs."""
        for i in busy.values():
            parts[i].request.wait_for(0)  # raises if the inference failed
        if time.perf_counter() > deadline:
            raise ExecutionFailure(f"inference did not finish within {self.run_timeout:g} s", cacheable=False)

    def _abort(self, parts: list[_Compiled], busy: dict[int, int]) -> None:
        """Let running segments end and drop their completions, so the next run starts clean."""
        for i in busy.values():
            try:
                parts[i].request.cancel()
                parts[i].request.wait()
            except Exception:  # a cancelled or failed request raises here; it is idle either way
                pass
        self._drain()

    def _drain(self) -> None:
        while True:
            try:
                self._done.get_nowait()
            except queue.Empty:
                return

    def outputs(self, plan: Plan) -> list[np.ndarray]:
        return [self._tensors[key].data.copy() for key in self.index.outputs]

    def close(self) -> None:
        if self._workers is not None:
            self._stop_workers()  # runs _Workers.stop once and drops the finalizer
            self._workers = None
        self._compiled.clear()
        self._users.clear()
        self._plans.clear()
        self._sizes.clear()
        self._priority.clear()
        self._compiled_ops = 0
        self.compiled_bytes = 0
