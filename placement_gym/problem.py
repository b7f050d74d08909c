"""The placement problem: one coarse graph, one platform, one latency backend and one reward.

:class:`PlacementProblem` is everything a placement method needs and nothing of Gymnasium: it validates
placements (the only place that does), evaluates them one at a time or as a batch, turns latencies into
rewards against the best single-device baseline, counts every evaluation (the baseline's included) and
keeps the best placement seen. A placement evaluated again within a run (see :meth:`PlacementProblem.start_run`)
is answered from the run's memo: it costs nothing, is not counted and is not reported to the listeners, so
the budget of a method counts distinct placements. :class:`~placement_gym.envs.DevicePlacementEnv` is a thin Gymnasium adapter
over one problem; methods reach the problem of an env through :func:`problem_of`.

A placement is an int array of shape ``(G,)``: entry ``g`` is the index (into ``platform.devices``) of the
device that runs group ``g``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from placement_gym.backends import LatencyBackend, LatencyResult, make_backend
from placement_gym.backends.base import check_placement, check_placements, placement_key_dtype
from placement_gym.benchmarks import Benchmark, load_benchmark
from placement_gym.coarsening import CoarseGraph
from placement_gym import sealing
from placement_gym.errors import PlacementError, PlacementGymError, ProtocolAccessError
from placement_gym.features import DeviceFeatures, StaticFeatures, device_features, static_features
from placement_gym.platforms import Platform, load_platform, resolve_memory
from placement_gym.rewards import Reward, get_reward

#: Called as ``fn(placement, evaluation)`` after every evaluation of a distinct placement.
Listener = Callable[[np.ndarray, "Evaluation"], None]
#: Called as ``fn(new, requests)`` before every request: ``requests`` placements asked for, ``new`` of them
#: not in the run's memo (0: all repeats); raises :class:`~placement_gym.errors.BudgetExhaustedError` to
#: refuse them (a run's budget and stall rule, see ``start_run`` and :mod:`placement_gym.budget`).
Guard = Callable[[int, int], None]
#: Placements a run's memo keeps (least recently used dropped first): about 0.6 KB each for the
#: simulated backend, so at most ~30 MB (``python -m experiments.speed.memory``: the ``cache_size 0`` run).
#: A placement dropped from a full memo costs again if repeated.
MEMO_SIZE = 50_000


@dataclass(frozen=True)
class Evaluation:
    """A placement's latency result and the reward it earns.

    Attributes:
        result: The backend's :class:`~placement_gym.backends.LatencyResult`.
        reward: The problem's reward for it (finite, also for infeasible placements).
    """

    result: LatencyResult
    reward: float

    @property
    def latency(self) -> float:
        return self.result.latency

    @property
    def feasible(self) -> bool:
        return self.result.feasible


class PlacementProblem:
    """Place the ``G`` groups of a coarse graph on the ``D`` devices of a platform; minimise latency.

    Build one with :meth:`make` (names and paths) or from ready parts. Construct it from names whenever it
    must be copied to other processes: such a problem pickles by rebuilding itself from its arguments.

    Args:
        benchmark: The model (op graph and fused layers).
        coarse: The coarsening of ``benchmark.ops`` whose groups are placed.
        platform: The devices.
        backend: Evaluates placements of ``coarse`` on ``platform``.
        reward: Reward name (see :mod:`placement_gym.rewards`) or a :class:`Reward`.
        infeasible_reward: Reward of an infeasible placement (default: the reward's own value).

    Attributes:
        evaluations: Distinct placements evaluated through :meth:`evaluate`/:meth:`evaluate_batch` (a
            repeat within a run is answered from the memo and not counted; see :meth:`start_run`).
        memo_hits: Repeats answered from the memo (free).
        requests: Placements asked for through :meth:`evaluate`/:meth:`evaluate_batch`, repeats included
            (a run's stall rule counts them, :mod:`placement_gym.budget`).
        memo_size: Placements the memo keeps (:data:`MEMO_SIZE`; 0: no memo, every repeat costs again).
        baseline_evaluations: Single-device placements evaluated to find the baseline (at most ``D``).
        cache_hits: Evaluations the backend answered from its cache.
        best_latency, best_placement: The fastest feasible placement evaluated so far.
        last_evaluation_s: Wall seconds the backend spent on the placement this problem evaluated last
            (:meth:`evaluate`, :meth:`evaluate_valid`, a batch of one): for a measured backend its
            compile or preparation, warm-up and timed runs, near zero when its result cache answers;
            0.0 for a repeat the memo answers; ``None`` before the first evaluation and after a batch of
            several placements (evaluated in one call, not timed one by one). Read it right after the
            call (the env's ``info["evaluation_s"]``); a wall time, so never part of a result.
        listeners: Called after every evaluation (budget trackers, progress bars); read-only, see
            :meth:`add_listener`.

    While an agent runs under the benchmark protocol the problem is sealed (:meth:`sealed`): the stored
    optimum (:attr:`reference`, :meth:`score`), the backend and the listeners cannot be read, and in a
    black-box run neither can the cost model (:class:`~placement_gym.errors.ProtocolAccessError`).
    """

    def __init__(
        self,
        benchmark: Benchmark,
        coarse: CoarseGraph,
        platform: Platform,
        backend: LatencyBackend,
        reward: str | Reward = "speedup",
        infeasible_reward: float | None = None,
    ) -> None:
        if backend.graph is not coarse or backend.platform is not platform:
            raise PlacementGymError("the backend must be built for this problem's coarse graph and platform")
        self.benchmark, self.coarse, self.platform, self._backend = benchmark, coarse, platform, backend
        self.reward = reward if isinstance(reward, Reward) else get_reward(reward, infeasible_reward)
        self.num_groups = coarse.num_groups
        self.num_devices = platform.num_devices
        self.evaluations = 0
        self.memo_hits = 0
        self.requests = 0
        self.memo_size = MEMO_SIZE
        self._memo: OrderedDict[bytes, Evaluation | tuple[float, float, bool]] = OrderedDict()  # see _remember
        self._key_dtype = placement_key_dtype(self.num_devices)  # of the memo's keys
        self._guards: list[Guard | None] = []  # one per active run
        self.baseline_evaluations = 0
        self.cache_hits = 0
        self.best_latency = math.inf
        self.best_placement: np.ndarray | None = None
        self.last_evaluation_s: float | None = None
        self._listeners: list[Listener] = []
        self._seal: str | None = None  # the track of the protocol run that sealed this problem
        self._seal_base = 0  # the guards from this index on belong to the sealed run and its nested ones
        self._lock = threading.RLock()  # one evaluation at a time: a budget holds across threads
        self._spec: dict[str, Any] | None = None
        self._baseline: tuple[int, LatencyResult] | None = None
        self._baseline_failure: str | None = None
        self._device_mask: np.ndarray | None = None
        self._features: StaticFeatures | None = None
        self._device_features: DeviceFeatures | None = None
        self._reference: Any = False  # not looked up yet
        self._cost_model = None

    @classmethod
    def make(
        cls,
        model: str | Benchmark = "tiny_cnn",
        platform: str | Platform = "local",
        backend: str = "simulated",
        *,
        coarsening: str = "fused",
        k: int | None = None,
        reward: str = "speedup",
        infeasible_reward: float | None = None,
        backend_kwargs: dict[str, Any] | None = None,
    ) -> PlacementProblem:
        """Build a problem from names: a zoo model, IR or ONNX path (or a :class:`Benchmark`), a platform
        name (or :class:`Platform`), a backend name (``"simulated"``, ``"measured"``, ``"ray"``), a
        coarsening level (``"ops"``, ``"fused"``, ``"k"`` with ``k``) and a reward. A platform whose memory
        is relative to the model (``memory_fraction``) is resolved for this model's weight bytes
        (:func:`~placement_gym.platforms.resolve_memory`)."""
        spec = dict(
            model=model,
            platform=platform,
            backend=backend,
            coarsening=coarsening,
            k=k,
            reward=reward,
            infeasible_reward=infeasible_reward,
            backend_kwargs=backend_kwargs,
        )
        reward_fn = get_reward(reward, infeasible_reward)  # fail on a bad name before any heavy work
        bench = model if isinstance(model, Benchmark) else load_benchmark(model)
        plat = platform if isinstance(platform, Platform) else load_platform(platform)
        coarse = bench.coarsen(coarsening, k=k)
        plat = resolve_memory(plat, float(coarse.graph.nodes["param_bytes"].sum()))
        problem = cls(
            bench,
            coarse,
            plat,
            make_backend(backend, bench, coarse, plat, **(backend_kwargs or {})),
            reward_fn,
        )
        problem._spec = spec
        return problem

    # ------------------------------------------------------------------ the seal of a protocol run
    @property
    def backend(self) -> LatencyBackend:
        """The latency backend (uncounted: not readable while an agent runs under the protocol).

        Raises:
            ProtocolAccessError: If the problem is sealed.
        """
        if self._seal is not None:
            raise ProtocolAccessError(
                "problem.backend is not readable while an agent runs under the protocol: its evaluations "
                "are not counted; use problem.evaluate / evaluate_batch"
            )
        return self._backend

    @property
    def sealed(self) -> str | None:
        """The track of the protocol run that sealed this problem, or ``None``."""
        return self._seal

    @contextmanager
    def seal(self, track: str) -> Iterator[None]:
        """Seal the problem (and the process, :mod:`placement_gym.sealing`) while an agent runs in ``track``.

        Raises:
            ConfigError: For an unknown track.
            ProtocolAccessError: If the problem is sealed already (runs of the protocol do not nest).
        """
        sealing.check_track(track)
        if self._seal is not None:
            raise ProtocolAccessError("this problem is already sealed by a protocol run")
        with sealing.seal(track):
            self._seal, self._seal_base = track, len(self._guards)
            try:
                yield
            finally:
                self._seal = None

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """The listeners, read-only (:meth:`add_listener`, :meth:`remove_listener`).

        Raises:
            ProtocolAccessError: If the problem is sealed.
        """
        if self._seal is not None:
            raise ProtocolAccessError("the problem's listeners are not readable while an agent runs under the protocol")
        return tuple(self._listeners)

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(placement, evaluation)`` after every evaluation of a distinct placement."""
        if not callable(listener):
            raise PlacementGymError(f"a listener must be callable, got {type(listener).__name__}")
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling ``listener`` (no error if it is not registered)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    # ------------------------------------------------------------------ static facts
    @property
    def host(self) -> int:
        """Index of the platform's host device."""
        return self.platform.host

    @property
    def deterministic(self) -> bool:
        """True if the same placement always gets the same latency (simulated backends)."""
        return self._backend.deterministic

    @property
    def backend_name(self) -> str:
        """The backend's name (``"measured"``, ``"simulated"``, ``"ray"``...), readable while sealed."""
        return self._backend.name

    @property
    def device_mask(self) -> np.ndarray:
        """``(G, D)`` bool: the device can hold the group's weights and outputs.

        A group that fits on no device allows every device (the backend then reports the placement
        infeasible with the reason). Read-only.
        """
        if self._device_mask is None:
            q = self.coarse.graph
            need = q.nodes["param_bytes"] + q.nodes["out_bytes"]
            cap = np.array(self.platform.capacities(), dtype=np.float64)
            mask = need[:, None] <= cap[None, :]
            mask[~mask.any(axis=1)] = True
            mask.setflags(write=False)
            self._device_mask = mask
        return self._device_mask

    @property
    def features(self) -> StaticFeatures:
        """The graph's static observation arrays, unpadded (``G`` nodes), computed once."""
        if self._features is None:
            self._features = static_features(self.coarse, self.num_groups, self.coarse.graph.num_edges)
        return self._features

    @property
    def device_features(self) -> DeviceFeatures:
        """Device-aware features (per group and device, per edge and link, per device) from
        :meth:`cost_model`, unpadded, computed once (:func:`placement_gym.features.device_features`)."""
        if self._seal == "black-box":
            sealing.require_white_box("problem.device_features (from the cost model)")
        if self._device_features is None:
            cost = self.cost_model()
            q = self.coarse.graph
            if not (np.array_equal(cost.edge_src, q.edge_src) and np.array_equal(cost.edge_dst, q.edge_dst)):
                raise PlacementGymError("the cost model's edges are not the coarse graph's, in order")
            self._device_features = device_features(cost, self.device_mask)
        return self._device_features

    def cost_model(self):
        """The :class:`~placement_gym.simulation.cost_model.CostModel` of this graph and platform.

        For the simulated backend it is exactly the model the latencies come from; otherwise it is the
        calibrated simulator's model of the same platform (profiled per-op times on local devices).

        Raises:
            ProtocolAccessError: In a black-box protocol run.
        """
        if self._seal == "black-box":
            sealing.require_white_box("problem.cost_model()")
        if getattr(self._backend, "cost_model", None) is not None:
            return self._backend.cost_model
        if self._cost_model is None:
            from placement_gym.simulation.cost_model import CostModel

            self._cost_model = CostModel.from_benchmark(self.benchmark, self.coarse, self.platform)
        return self._cost_model

    @property
    def task_sha256(self) -> str:
        """The content hash of this task (:func:`placement_gym.tasks.task_sha256`): model, graph version,
        coarsening level, group count and every platform figure, not the platform's name."""
        from placement_gym.tasks import task_sha256

        return task_sha256(
            self.benchmark.name,
            self.benchmark.version,
            self.coarse.level,
            self.num_groups,
            self.platform,
            self.benchmark.source_sha256,
        )

    @property
    def reference(self):
        """The stored :class:`~placement_gym.tasks.ReferenceOptimum` of this task's content
        (:attr:`task_sha256`; simulated backend only), else ``None``: a platform that keeps a stored task's
        name but changes a figure has none.

        Raises:
            ProtocolAccessError: If the problem is sealed (no agent reads the optimum).
        """
        if self._seal is not None:
            sealing.refuse_optima("problem.reference (the stored optimum)")
            raise ProtocolAccessError("problem.reference cannot be read while an agent runs under the protocol")
        return self._stored_reference()

    def _stored_reference(self):
        """:attr:`reference`, for the problem's own use (its baseline), sealed or not."""
        if self._reference is False:
            self._reference = None
            if self._backend.name == "simulated":
                from placement_gym.tasks import stored_reference

                self._reference = stored_reference(
                    self.benchmark.name, self.benchmark.version, self.platform.name, self.coarse.level,
                    self.num_groups, task_sha256=self.task_sha256,
                )  # fmt: skip
        return self._reference

    def score(self, latency: float) -> float:
        """Normalised score of ``latency`` against the reference optimum (0: the best single device,
        1: the optimum; D4RL-style), or ``nan`` when the task has no reference optimum or no headroom.

        Raises:
            ProtocolAccessError: If the problem is sealed.
        """
        ref = self.reference
        if ref is None or not ref.latency < ref.baseline_latency:
            return math.nan
        return ref.score(latency)

    # ------------------------------------------------------------------ validation
    def validate(self, placement: Sequence[int] | np.ndarray, length: int | None = None) -> np.ndarray:
        """Return ``placement`` as an int64 array of shape ``(G,)`` (or ``(length,)``, e.g. a padded action).

        Raises:
            PlacementError: Wrong shape, a non-integer dtype, or a device index out of range.
        """
        return check_placement(placement, self.num_groups if length is None else length, self.platform)

    def validate_batch(self, placements: Sequence[Sequence[int]] | np.ndarray) -> np.ndarray:
        """Return ``placements`` as an int64 array of shape ``(B, G)``.

        Raises:
            PlacementError: Not ``(B, G)``, a non-integer dtype, or a device index out of range.
        """
        return check_placements(placements, self.num_groups, self.platform)

    # ------------------------------------------------------------------ baseline
    def _find_baseline(self) -> None:
        if self._baseline is not None or self._baseline_failure is not None:
            return
        singles = np.repeat(np.arange(self.num_devices, dtype=np.int64)[:, None], self.num_groups, axis=1)
        results = self._backend.evaluate_batch(singles)
        self.baseline_evaluations += len(results)
        best = None
        for device, res in enumerate(results):
            if res.feasible and (best is None or res.latency < best[1].latency):
                best = (device, res)
        if best is not None:
            self._baseline = best
            return
        reasons = "; ".join(f"{d.name}: {r.reason}" for d, r in zip(self.platform.devices, results))
        ref = self._stored_reference()
        if ref is not None and ref.baseline_placement is not None:
            # no single device holds the model: the task's documented feasible alternative
            res = self._backend.evaluate(np.asarray(ref.baseline_placement, dtype=np.int64))
            self.baseline_evaluations += 1
            if res.feasible:
                self._baseline = (-1, res)
                return
            reasons += f"; the stored baseline ({ref.baseline}): {res.reason}"
        self._baseline_failure = (
            f"no single device of platform {self.platform.name!r} can run the whole model ({reasons}), and "
            "the task stores no feasible alternative baseline; the speedup rewards need a baseline "
            "(use reward='neg_latency_ms')"
        )

    @property
    def has_baseline(self) -> bool:
        """True if the problem has a feasible baseline (evaluates the ``D`` single-device placements once)."""
        self._find_baseline()
        return self._baseline is not None

    @property
    def baseline(self) -> LatencyResult:
        """The baseline's result: the best single-device placement (``D`` evaluations, once, counted
        separately), or, where no single device can run the model, the feasible alternative stored with the
        task's reference optimum (:attr:`reference`: the best of Baechi's memory-aware list schedulers),
        evaluated once more.

        Raises:
            PlacementError: If no single device can run the model and the task stores no alternative.
        """
        self._find_baseline()
        if self._baseline is None:
            raise PlacementError(self._baseline_failure)
        return self._baseline[1]

    @property
    def baseline_placement(self) -> np.ndarray:
        """The ``(G,)`` placement of :attr:`baseline` (a single device, or the stored alternative)."""
        _ = self.baseline
        device = self._baseline[0]  # type: ignore[index]
        if device >= 0:
            return np.full(self.num_groups, device, dtype=np.int64)
        return np.asarray(self._stored_reference().baseline_placement, dtype=np.int64)

    @property
    def baseline_device(self) -> int:
        """Index of the best single device (see :attr:`baseline`).

        Raises:
            PlacementError: If no single device can run the model (the baseline is then a split:
                :attr:`baseline_placement`).
        """
        _ = self.baseline
        if self._baseline[0] < 0:  # type: ignore[index]
            raise PlacementError(
                f"no single device of platform {self.platform.name!r} can run the whole model; the baseline "
                f"is a split ({self._stored_reference().baseline}): use problem.baseline_placement"
            )
        return self._baseline[0]  # type: ignore[index]

    # ------------------------------------------------------------------ runs and the memo
    def start_run(self, guard: Guard | None = None) -> None:
        """Start a run (one method's search): forget the placements seen so far and install ``guard``.

        Within a run every distinct placement is evaluated, counted and reported once; a repeat is
        answered from the memo (bounded by :attr:`memo_size`). ``guard`` is asked before every request
        (repeats included) and refuses new placements past the run's budget, or a request of a stalled
        run. Runs nest: the latest run's guard decides until it ends, then the enclosing run's guard
        applies again (a method's run inside a benchmark's run of the same budget); in a sealed protocol
        run (:meth:`seal`) every run's guard since the seal is asked, so a run the agent starts can tighten
        the budget but never loosen it. A problem that never started a run keeps one memo for its whole
        life.
        """
        self._memo.clear()
        self._guards.append(guard)

    def end_run(self, guard: Guard | None = None) -> None:
        """End the run that installed ``guard`` (the memo stays until the next :meth:`start_run`)."""
        for i in range(len(self._guards) - 1, -1, -1):
            if self._guards[i] == guard:
                del self._guards[i]
                break

    def _ask_guards(self, new: int, requests: int = 1) -> None:
        """Ask the guards about a request of ``requests`` placements, ``new`` of them not in the memo (each
        may refuse it): the latest run's, and in a sealed protocol run every run's since the seal, so a run
        an agent starts cannot loosen the protocol's; then count the requests (:attr:`requests`, which a
        run reads as a meter)."""
        for guard in self._guards[self._seal_base :] if self._seal is not None else self._guards[-1:]:
            if guard is not None:
                guard(new, requests)
        self.requests += requests

    def seen(self, placement: Sequence[int] | np.ndarray) -> bool:
        """True if ``placement`` is in the run's memo (evaluating it again is free)."""
        return self.validate(placement).astype(self._key_dtype).tobytes() in self._memo

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, placement: Sequence[int] | np.ndarray) -> Evaluation:
        """Evaluate one ``(G,)`` placement: its latency result and reward (counted once per run).

        Raises:
            PlacementError: For a malformed placement (never for a merely bad one: that is infeasible).
            BudgetExhaustedError: If the placement is new and the run's budget is spent.
        """
        return self.evaluate_valid(self.validate(placement))

    def evaluate_valid(self, placement: np.ndarray) -> Evaluation:
        """:meth:`evaluate` of a placement that :meth:`validate` returned (a contiguous int64 ``(G,)`` array
        in range, not checked again: the envs validate each action once).

        Raises:
            BudgetExhaustedError: If the placement is new and the run's budget is spent.
        """
        key = placement.astype(self._key_dtype).tobytes()
        with self._lock:  # the guard's check and the count are one step, whatever the threads
            known = self._recall(key)
            if known is not None:  # a repeat in this run: free, but a request all the same
                self._ask_guards(0, 1)
                self.last_evaluation_s = 0.0
                return known
            self._ask_guards(1, 1)
            result = self._timed_evaluate_valid(placement)
            evaluation = Evaluation(result, self._reward(result))
            self._remember(key, evaluation)
            self._count(placement, evaluation)
            return evaluation

    def evaluate_batch(self, placements: Sequence[Sequence[int]] | np.ndarray) -> list[Evaluation]:
        """Evaluate a ``(B, G)`` batch in one backend call (parallel on pooled backends).

        A placement repeated within the batch, or seen before in the run, is evaluated, counted and
        reported to the listeners once; every row gets its evaluation, in order.

        Raises:
            PlacementError: For a malformed batch.
            BudgetExhaustedError: If the batch's new placements exceed the run's budget (none is evaluated).
        """
        batch = self.validate_batch(placements)
        if not len(batch):
            return []
        first, inverse = first_occurrences(batch)
        evaluations = self._evaluate_distinct(batch[first], len(batch))
        return [evaluations[j] for j in inverse]

    def _evaluate_distinct(self, distinct: np.ndarray, requests: int) -> list[Evaluation]:
        """Evaluate validated, pairwise distinct placements ``(B, G)`` (of a request of ``requests`` rows):
        those in the memo from it, the others in one backend call, counted."""
        with self._lock:
            return self._evaluate_distinct_locked(distinct, requests)

    def _evaluate_distinct_locked(self, distinct: np.ndarray, requests: int) -> list[Evaluation]:
        keys = [row.tobytes() for row in distinct.astype(self._key_dtype)]
        new = [i for i, key in enumerate(keys) if key not in self._memo]
        self._ask_guards(len(new), requests)
        fresh = self._backend_evaluate(distinct[new]) if new else []
        if len(distinct) > 1:  # several placements in one call: not timed one by one
            self.last_evaluation_s = None
        elif not new:
            self.last_evaluation_s = 0.0
        out: list[Evaluation | None] = [None] * len(distinct)
        for i, evaluation in zip(new, fresh):
            out[i] = evaluation
        for i, key in enumerate(keys):
            if out[i] is None:
                out[i] = self._recall(key)
        for i, evaluation in zip(new, fresh):
            self._remember(keys[i], evaluation)
            self._count(distinct[i], evaluation)
        return out  # type: ignore[return-value]

    def _recall(self, key: bytes) -> Evaluation | None:
        """The memo's evaluation of the placement with memo key ``key`` (now its most recently used, a hit
        counted), or ``None``."""
        entry = self._memo.get(key)
        if entry is None:
            return None
        self._memo.move_to_end(key)
        self.memo_hits += 1
        if type(entry) is tuple:
            latency, reward, cached = entry
            return Evaluation(LatencyResult(latency, cached=cached), reward)
        return entry

    def _remember(self, key: bytes, evaluation: Evaluation) -> None:
        """Keep ``evaluation`` in the memo (dropping the least recently used beyond :attr:`memo_size`). A result
        that is its latency alone (every feasible simulated one) is kept as a tuple of plain values, which
        the garbage collector stops tracking: its full collections walked every memo entry otherwise (9% of
        a 100,000-step one-shot run on BERT)."""
        if self.memo_size <= 0:
            return
        r = evaluation.result
        plain = r.feasible and not (r.reason or r.spread or r.samples or r.ci) and r.host_load is None
        self._memo[key] = (r.latency, evaluation.reward, r.cached) if plain else evaluation
        if len(self._memo) > self.memo_size:
            self._memo.popitem(last=False)

    def _backend_evaluate(self, distinct: np.ndarray) -> list[Evaluation]:
        """Evaluate ``(B, G)`` placements in one backend call (not counted)."""
        if len(distinct) == 1:
            results = [self._timed_evaluate_valid(distinct[0])]
        else:
            results = self._backend.evaluate_batch(distinct)
        if len(results) != len(distinct):
            raise PlacementGymError(
                f"backend {self._backend.name!r} returned {len(results)} results for {len(distinct)} placements"
            )
        return [Evaluation(res, self._reward(res)) for res in results]

    def _timed_evaluate_valid(self, placement: np.ndarray) -> LatencyResult:
        """The backend's result for one placement by its one-placement path (its fastest), the wall seconds
        it took kept in :attr:`last_evaluation_s`."""
        start = time.perf_counter()
        result = self._backend.evaluate_valid(placement)
        self.last_evaluation_s = time.perf_counter() - start
        return result

    def _reward(self, res: LatencyResult) -> float:
        if not res.feasible:
            return self.reward.infeasible
        baseline = self.baseline.latency if self.reward.needs_baseline else math.nan
        return float(self.reward(res.latency, baseline, True))

    def _count(self, placement: np.ndarray, evaluation: Evaluation) -> None:
        self.evaluations += 1
        self.cache_hits += int(evaluation.result.cached)
        if evaluation.feasible and evaluation.latency < self.best_latency:
            self.best_latency, self.best_placement = float(evaluation.latency), placement.copy()
        for listener in list(self._listeners):
            listener(placement, evaluation)

    def stats(self) -> dict[str, Any]:
        """Evaluation counts and the best placement found so far."""
        return {
            "evaluations": self.evaluations,
            "memo_hits": self.memo_hits,
            "baseline_evaluations": self.baseline_evaluations,
            "cache_hits": self.cache_hits,
            "best_latency": self.best_latency,
            "best_placement": None if self.best_placement is None else self.best_placement.copy(),
        }

    def close(self) -> None:
        """Release the backend's compiled models, workers and files."""
        self._backend.close()

    def __repr__(self) -> str:
        return (
            f"PlacementProblem({self.benchmark.name!r}, {self.coarse.level!r}: {self.num_groups} groups, "
            f"platform {self.platform.name!r}: {self.num_devices} devices, backend {self._backend.name!r}, "
            f"reward {self.reward.name!r})"
        )

    # ------------------------------------------------------------------ pickling (vector envs, Ray)
    def __getstate__(self) -> dict[str, Any]:
        if self._spec is None or not isinstance(self._spec["backend"], str):
            raise TypeError(
                "a PlacementProblem built from ready parts cannot be pickled; build it with "
                "PlacementProblem.make(...) (or the env from names) to copy it to other processes"
            )
        return {"spec": self._spec}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(PlacementProblem.make(**state["spec"]).__dict__)


def first_occurrences(rows: np.ndarray) -> tuple[list[int], list[int]]:
    """The distinct rows of a ``(B, G)`` array in order of first appearance: the index of each one's first
    occurrence (ascending), and for every row the index of its distinct row among them. Found by the rows'
    bytes (``np.unique(axis=0)`` sorts a structured view of the array: slow for the small batches searches
    send one after another)."""
    index: dict[bytes, int] = {}
    first: list[int] = []
    inverse = []
    for i, row in enumerate(rows):
        j = index.setdefault(row.tobytes(), len(first))
        if j == len(first):
            first.append(i)
        inverse.append(j)
    return first, inverse


def problem_of(env: Any) -> PlacementProblem:
    """The :class:`PlacementProblem` behind a ``DevicePlacement*`` env (through any wrappers) or an agent's
    :class:`~placement_gym.view.TaskView` (sealed while the agent runs).

    Raises:
        PlacementGymError: If ``env`` is not a device-placement env.
    """
    if isinstance(env, PlacementProblem):
        return env
    behind = getattr(env, "__placement_problem__", None)  # an agent's TaskView
    if behind is not None:
        return behind()
    problem = getattr(getattr(env, "unwrapped", None), "problem", None)
    if not isinstance(problem, PlacementProblem):
        raise PlacementGymError(
            f"{type(getattr(env, 'unwrapped', env)).__name__} is not a device-placement env: "
            "expected a DevicePlacementEnv (or a PlacementProblem)"
        )
    return problem
