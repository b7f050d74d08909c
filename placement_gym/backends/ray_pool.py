"""Evaluate placements on a pool of Ray actors, each holding its own backend (scale-out past one machine).

Measured evaluations are the bottleneck of every learner; Mirhoseini et al. (2017) measured placements on
a pool of workers. :class:`RayBackend` does the same with `Ray <https://docs.ray.io>`_: it starts
``num_workers`` actors, each of which loads the benchmark, builds the same coarse graph and platform and
an inner backend (``"measured"`` by default) on whatever node Ray schedules it. Results are identical in
form to the inner backend's.

Dispatch: :meth:`RayBackend.evaluate_batch` keeps every actor busy with one chunk (``chunk_size``
placements, one by default) at a time, hands the next chunk to whichever actor is idle first
(``ray.wait``) and returns the results in input order; :meth:`~RayBackend.evaluate` is a batch of one.
Identical placements within one batch are evaluated once and share the result. Each actor keeps its
inner backend's own result cache; a placement evaluated in an earlier call goes back to the actor that
evaluated it, so repeats are answered from its cache as by a single backend (unless that actor has
been replaced since).

Faults: when an actor dies (its process killed, out of memory, a crash inside OpenVINO), the pool
replaces it with a new actor and re-runs the placements it was evaluating, up to ``max_retries`` more
times each; a placement that still fails gets an infeasible :class:`LatencyResult` whose reason says so.
Nothing raises out of :meth:`~RayBackend.evaluate` or :meth:`~RayBackend.evaluate_batch` for a worker
fault, so one dead worker never stops training. Malformed placements still raise
:class:`~placement_gym.errors.PlacementError`, before anything is sent.

Point it at a cluster with ``address="ray://head-node:10001"`` (Ray Client) or ``address="auto"`` on a
node of a running cluster (``ray start --head`` on one machine, ``ray start --address=<head>:6379`` on
the others); ``address=None`` starts a local instance. Each actor reserves ``cpus_per_worker`` CPUs, so
Ray never runs more measuring actors on a machine than it has CPUs; with ``pin_cpus=True`` each actor
also pins itself to that many cores of its machine that no other pinned actor holds, so that two
actors' measurements never share a core, and builds its ``local`` platform there (calibrated on its
cores: :func:`~placement_gym.platforms.local.local_platform`) in place of the driver's. Worker nodes need
placement-gym installed and model files reachable (zoo models are rebuilt from their recipes, so a zoo name is enough); actors put the driver's
copy of placement-gym first on their ``PYTHONPATH``, so on the driver's machine they run the same code.
"""

from __future__ import annotations

import math
import os
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import placement_gym
from placement_gym.backends.base import LatencyBackend, LatencyResult
from placement_gym.errors import BackendError, PlacementError
from placement_gym.locks import check_private, private_dir, try_lock
from placement_gym.measured.workers import pin_process

#: The private lock folder (:func:`placement_gym.locks.private_dir`) where pinned actors lock the cores
#: they hold: one ``cpu<N>.lock`` per core, released by the kernel when its process dies.
CORE_LOCK_DIR_NAME = "cores"
#: Placements whose actor the pool remembers, to send repeats back to that actor's cache.
HOMES_KEPT = 65536


def claim_cores(count: int, lock_dir: Path | None = None) -> tuple[list[int], list[int]]:
    """Claim ``count`` cores of this process's affinity set that no other live process has claimed.

    A claim is an exclusive ``flock`` on ``lock_dir/cpu<N>.lock`` (:func:`placement_gym.locks.try_lock`:
    never through a link) held through the returned file descriptors: it lasts until they are closed or
    the process dies, however it dies. ``lock_dir`` defaults to this user's private folder ``cores``; a
    folder given must be private too (:func:`placement_gym.locks.check_private`).

    Returns:
        The claimed core ids and the lock file descriptors (keep them open).

    Raises:
        BackendError: If fewer than ``count`` cores are free or the platform cannot pin.
        LockError: If the lock folder is not private or a lock file is a link.
    """
    if not hasattr(os, "sched_setaffinity"):
        raise BackendError("pinning Ray workers to cores needs Linux (os.sched_setaffinity)")
    lock_dir = private_dir(CORE_LOCK_DIR_NAME) if lock_dir is None else check_private(Path(lock_dir))
    allowed = sorted(os.sched_getaffinity(0))
    cores: list[int] = []
    fds: list[int] = []
    for core in allowed:
        try:
            fd = try_lock(lock_dir / f"cpu{core}.lock")
        except BaseException:
            for held in fds:
                os.close(held)
            raise
        if fd is None:
            continue
        cores.append(core)
        fds.append(fd)
        if len(cores) == count:
            return cores, fds
    for fd in fds:
        os.close(fd)
    raise BackendError(
        f"cannot pin a Ray worker to {count} core(s): only {len(cores)} of cores {allowed} are free "
        f"(held by other pinned workers, see {lock_dir})"
    )


class _Evaluator:
    """The Ray actor's body: one inner backend, built where the actor runs (pinned first if asked)."""

    def __init__(
        self,
        model: str,
        level: str,
        platform: Any,
        inner: str | type[LatencyBackend],
        inner_kwargs: dict[str, Any],
        pin_cores: int,
    ) -> None:
        from placement_gym.backends import make_backend
        from placement_gym.benchmarks import load_benchmark

        self.cores: list[int] = []
        self.evaluations = 0
        self.busy_seconds = 0.0  # wall time spent evaluating
        self.cpu_seconds = 0.0  # CPU time of the whole process (all threads) spent evaluating
        self._locks: list[int] = []
        if pin_cores:
            # Before the backend exists: OpenVINO's threads inherit the affinity of the thread creating them.
            self.cores, self._locks = claim_cores(pin_cores)
            pin_process(self.cores)
            if platform.name == "local":  # this machine's devices, calibrated on the cores it now holds
                platform = _actor_local_platform(platform)
        bench = load_benchmark(model)
        graph = bench.coarsen_as(level)
        if isinstance(inner, str):
            self.backend = make_backend(inner, bench, graph, platform, **inner_kwargs)
        else:
            self.backend = inner(bench, graph, platform, **inner_kwargs)

    def describe(self) -> dict[str, Any]:
        """The actor's process id, pinned cores, its backend's platform, placements evaluated, wall and CPU
        seconds spent evaluating them, and the placement-gym it imported."""
        return {
            "pid": os.getpid(),
            "cores": self.cores,
            "platform": self.backend.platform.description,
            "evaluations": self.evaluations,
            "busy_seconds": self.busy_seconds,
            "cpu_seconds": self.cpu_seconds,
            "package": placement_gym.__file__,
        }

    def evaluate_batch(self, placements: np.ndarray) -> list[LatencyResult]:
        wall, cpu = time.perf_counter(), time.process_time()
        out = []
        for p in placements:
            self.evaluations += 1
            try:
                out.append(self.backend.evaluate(p))
            except Exception as exc:  # a failed evaluation is an infeasible result, never a dead worker
                out.append(LatencyResult.infeasible(f"worker error: {type(exc).__name__}: {exc}"))
        self.busy_seconds += time.perf_counter() - wall
        self.cpu_seconds += time.process_time() - cpu
        return out


class RayBackend(LatencyBackend):
    """Spread evaluations over Ray actors, replacing actors that die.

    Args:
        benchmark: The benchmark; workers reload it from its zoo name or IR/ONNX path.
        graph: The coarse graph (workers rebuild it from ``graph.level``).
        platform: The platform (sent to the workers).
        inner: Backend each worker runs: a registered name (``"measured"``, ``"simulated"``) or a
            :class:`LatencyBackend` subclass importable on the workers.
        num_workers: Number of actors.
        address: Ray cluster address (``None``: start or reuse a local instance).
        cpus_per_worker: CPUs each actor reserves.
        inner_kwargs: Keyword arguments of the inner backend (warm-up, repeats...).
        max_retries: Times a placement is re-run after the actor evaluating it died.
        chunk_size: Placements sent to an actor at a time (1 balances best; more amortises Ray's
            per-call overhead, about a millisecond, when evaluations are that fast).
        pin_cpus: Pin each actor to ``ceil(cpus_per_worker)`` cores of its machine held by no other
            pinned actor (Linux).
        start_timeout: Seconds to wait for the actors to be built (Ray queues an actor for as long as
            no node has the CPUs it reserves).

    Raises:
        BackendError: If Ray is not installed or cannot connect, the model cannot be sent to workers,
            an argument is out of range, or the workers cannot start.
    """

    name = "ray"

    def __init__(
        self,
        benchmark: Any,
        graph: Any,
        platform: Any,
        *,
        inner: str | type[LatencyBackend] = "measured",
        num_workers: int = 2,
        address: str | None = None,
        cpus_per_worker: float = 1.0,
        inner_kwargs: dict[str, Any] | None = None,
        max_retries: int = 2,
        chunk_size: int = 1,
        pin_cpus: bool = False,
        start_timeout: float = 300.0,
    ) -> None:
        super().__init__(benchmark, graph, platform)
        try:
            import ray
        except ImportError as exc:
            raise BackendError("the ray backend needs Ray: pip install 'placement-gym[ray]'") from exc
        source = benchmark.source
        if not isinstance(source, (str, Path)):
            raise BackendError(
                "the ray backend needs a zoo model or an IR/ONNX file path, not an in-memory model"
            )
        from placement_gym.zoo import MODELS

        model = benchmark.name if benchmark.name in MODELS else str(source)
        for arg, value, low in (
            ("num_workers", num_workers, 1),
            ("max_retries", max_retries, 0),
            ("chunk_size", chunk_size, 1),
        ):
            if not isinstance(value, int) or value < low:
                raise BackendError(f"{arg} must be an integer >= {low}, got {value!r}")
        if not cpus_per_worker > 0:
            raise BackendError(f"cpus_per_worker must be > 0, got {cpus_per_worker!r}")
        from placement_gym.backends import backend_class

        inner_class = backend_class(inner) if isinstance(inner, str) else inner
        if not (isinstance(inner_class, type) and issubclass(inner_class, LatencyBackend)):
            raise BackendError(f"inner must be a backend name or a LatencyBackend subclass, got {inner!r}")
        if inner_class is RayBackend:
            raise BackendError("inner='ray' would nest pools; give the backend each actor runs")
        self.deterministic = inner_class.deterministic
        try:
            if not ray.is_initialized():
                extra = {"include_dashboard": False} if address is None else {}
                ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, **extra)
        except Exception as exc:
            raise BackendError(f"cannot connect to Ray at {address!r}: {exc}") from exc
        self.max_retries, self.chunk_size = max_retries, chunk_size
        #: Actors replaced after they died, since the pool started.
        self.replaced = 0
        self._ray = ray
        root = str(Path(placement_gym.__file__).resolve().parents[1])
        pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        actor = ray.remote(_Evaluator).options(
            num_cpus=cpus_per_worker, runtime_env={"env_vars": {"PYTHONPATH": pythonpath}}
        )
        args = (
            model,
            graph.level,
            platform,
            inner,
            dict(inner_kwargs or {}),
            math.ceil(cpus_per_worker) if pin_cpus else 0,
        )
        self._spawn = lambda: actor.remote(*args)
        self.workers = [self._spawn() for _ in range(num_workers)]
        self._idle = deque(range(num_workers))
        #: Placement hash -> (slot, generation of the slot's actor) that evaluated it, oldest first.
        self._home: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self._generation = [0] * num_workers
        try:
            self._ray.get([w.describe.remote() for w in self.workers], timeout=start_timeout)
        except ray.exceptions.GetTimeoutError as exc:
            self.close()
            raise BackendError(
                f"the Ray workers did not start within {start_timeout} s: {num_workers} actors of "
                f"{cpus_per_worker} CPUs each, the cluster has {ray.available_resources().get('CPU', 0)} "
                "CPUs free"
            ) from exc
        except ray.exceptions.RayError as exc:
            self.close()
            raise BackendError(f"the Ray workers could not start: {_first_line(exc)}") from exc

    def describe_workers(self) -> list[dict[str, Any]]:
        """Each actor's ``pid``, pinned ``cores``, ``platform`` description, ``evaluations`` made,
        ``busy_seconds`` and ``cpu_seconds`` spent on them and the ``package`` file of placement-gym it
        imported (waits for the actors to be built)."""
        return self._ray.get([w.describe.remote() for w in self.workers])

    def evaluate(self, placement: Sequence[int] | np.ndarray) -> LatencyResult:
        return self.evaluate_batch(self.validate(placement)[None, :])[0]

    def evaluate_batch(self, placements: np.ndarray) -> list[LatencyResult]:
        """Latencies of a batch of shape ``(B, G)``, in input order, evaluated across all actors.

        Raises:
            PlacementError: If the batch is not ``(B, G)`` or a row is not a valid placement.
            BackendError: If the pool was closed.
        """
        if not self.workers:
            raise BackendError("the Ray pool is closed")
        placements = np.asarray(placements)
        if placements.ndim != 2:
            raise PlacementError(f"a batch of placements must have shape (B, G), got {placements.shape}")
        first: dict[bytes, int] = {}
        rows = []
        for p in placements:
            row = self.validate(p)
            rows.append(first.setdefault(row.tobytes(), len(first)))
        unique = np.stack([np.frombuffer(k, dtype=np.int64) for k in first]) if first else placements
        results = self._dispatch(unique)
        return [results[r] for r in rows]

    def _dispatch(self, batch: np.ndarray) -> list[LatencyResult]:
        """Evaluate distinct placements: one chunk per idle actor, the next chunk to the first actor done.

        A placement evaluated before goes back to the actor that evaluated it, whose cache answers it
        at once (a replaced actor's cache is gone, so its placements go anywhere).
        """
        ray = self._ray
        results: list[LatencyResult | None] = [None] * len(batch)
        failures = [0] * len(batch)
        keys = [hash(row.tobytes()) for row in batch]  # a collision only sends a placement elsewhere
        homed: dict[int, list[int]] = {}
        pending: deque[int] = deque()
        for i, key in enumerate(keys):
            slot, generation = self._home.get(key, (-1, -1))
            if slot >= 0 and self._generation[slot] == generation:
                homed.setdefault(slot, []).append(i)
            else:
                pending.append(i)
        if len(self._idle) != len(self.workers):  # a previous call was interrupted while slots ran
            self._idle = deque(range(len(self.workers)))
        idle = self._idle  # longest idle first, across calls too: single evaluations take turns
        running: dict[Any, tuple[int, list[int]]] = {}
        for slot, chunk in homed.items():
            idle.remove(slot)
            running[self.workers[slot].evaluate_batch.remote(batch[chunk])] = (slot, chunk)
        while pending or running:
            while pending and idle:
                slot = idle.popleft()
                chunk = [pending.popleft() for _ in range(min(self.chunk_size, len(pending)))]
                running[self.workers[slot].evaluate_batch.remote(batch[chunk])] = (slot, chunk)
            (ref,), _ = ray.wait(list(running), num_returns=1)
            slot, chunk = running.pop(ref)
            try:
                for i, result in zip(chunk, ray.get(ref), strict=True):
                    results[i] = result
                    self._remember(keys[i], slot)
            except ray.exceptions.RayError as exc:
                if isinstance(exc, ray.exceptions.RayActorError):
                    self._replace(slot)
                retry = []
                for i in chunk:
                    failures[i] += 1
                    if failures[i] > self.max_retries:
                        results[i] = LatencyResult.infeasible(
                            f"Ray worker failed {failures[i]} times evaluating this placement "
                            f"(last: {type(exc).__name__}: {_first_line(exc)})"
                        )
                    else:
                        retry.append(i)
                pending.extendleft(reversed(retry))
            idle.append(slot)
        return results  # type: ignore[return-value]

    def _remember(self, key: int, slot: int) -> None:
        """Record that the actor now in ``slot`` evaluated the placement hashed to ``key``."""
        self._home[key] = (slot, self._generation[slot])
        self._home.move_to_end(key)
        if len(self._home) > HOMES_KEPT:
            self._home.popitem(last=False)

    def _replace(self, slot: int) -> None:
        """Start a new actor in place of the dead one in ``slot``."""
        try:
            self._ray.kill(self.workers[slot], no_restart=True)
        except Exception:  # already gone, which is the usual case
            pass
        self.workers[slot] = self._spawn()
        self._generation[slot] += 1
        self.replaced += 1

    def close(self) -> None:
        for w in getattr(self, "workers", []):
            try:
                self._ray.kill(w, no_restart=True)
            except Exception:  # a dead actor or a Ray already shut down: nothing left to release
                pass
        self.workers = []


def _actor_local_platform(driver: Any) -> Any:
    """The ``local`` platform of a pinned actor's cores, in place of the driver's.

    Raises:
        BackendError: If its devices are not the driver's (another node with other devices).
    """
    from placement_gym.platforms import load_platform

    platform = load_platform("local")
    names, expected = [d.name for d in platform.devices], [d.name for d in driver.devices]
    if names != expected:
        raise BackendError(
            f"this node's local platform has devices {names}, the driver's {expected}: placements of one "
            "cannot run on the other"
        )
    return platform


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__
