"""A run: one method's search on one problem under a budget of distinct placements.

A :class:`Run` starts a run on the problem (:meth:`~placement_gym.problem.PlacementProblem.start_run`):
until :meth:`Run.detach`, every distinct placement the problem evaluates is counted here, whoever asked
for it (the method, or an RL library through ``env.step``); a repeat is answered from the run's memo and
costs nothing; the problem refuses a new placement past the budget
(:class:`~placement_gym.errors.BudgetExhaustedError`). ``agents.base.BudgetTracker`` is this with the
method's result added.

A run with a budget also ends when it stalls (:class:`~placement_gym.errors.RunStalledError`, a
``BudgetExhaustedError``): a repeat is free in the budget but not in time, so a run counts every evaluation
request (:attr:`Run.requests`, repeats included: an env step that evaluates is one) and refuses

* a repeat after :data:`STALL_REQUESTS` requests in a row without a new placement, and
* any request past :data:`REQUEST_MULTIPLE` times its budget in all.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from placement_gym.errors import BudgetExhaustedError, PlacementGymError, RunStalledError
from placement_gym.limits import BYTES_PER_EVALUATION, require_memory
from placement_gym.problem import MEMO_SIZE, Evaluation, PlacementProblem, first_occurrences

#: Evaluation requests in a row without a new placement after which a run's next repeat ends it (docs/protocol.md).
STALL_REQUESTS = 2_000
#: Evaluation requests a run may make in all, as a multiple of its budget of distinct placements.
REQUEST_MULTIPLE = 5

#: Called as ``fn(tracker, placement, latency, feasible)`` after every evaluation the tracker sees; the
#: tracker's ``worker``, ``vector_step`` and ``evaluation_s`` describe that evaluation (see :class:`Run`).
TrackerListener = Callable[["Run", np.ndarray, float, bool], None]


class Run:
    """A method's run on one problem: its evaluation budget, history and best placement.

    Construction starts a run on the problem (:meth:`PlacementProblem.start_run`): from then on until
    :meth:`detach`, every distinct placement the problem evaluates is observed here, whoever asked for it
    (the method, or an RL library through ``env.step``); a repeat is answered from the run's memo and costs
    nothing, and the problem refuses a new placement past the budget
    (:class:`~placement_gym.errors.BudgetExhaustedError`). Evaluations made in other processes (a
    ``SubprocVecEnv``'s workers) are reported with :meth:`record`, which also counts each distinct
    placement once.

    Args:
        problem: The problem whose evaluations are counted.
        budget: Maximum number of distinct placements evaluated; ``None`` for no limit (and no stall rule).
        stall_requests: Requests in a row without a new placement after which a repeat ends the run
            (``None``: :data:`STALL_REQUESTS`; 0: never).
        request_multiple: Requests in all, as a multiple of ``budget``, after which any request ends the
            run (``None``: :data:`REQUEST_MULTIPLE`; 0: no limit).

    Attributes:
        requests: Evaluation requests answered since the run started (placements asked for, repeats
            included; also while a nested run decides).
        streak: Requests in a row without a new placement (counted while this run's guard decides).
        stalled: Whether the run ended by the stall rule.
        worker, vector_step, evaluation_s: The evaluation being reported to the listeners: the index of
            the env copy (a vector env's worker) that made it and the vector env's step (counted from 1),
            for one recorded from another process (``None`` for one made in this process), and the wall
            seconds the backend spent on it (:attr:`PlacementProblem.last_evaluation_s`; from another
            process, what it reported; ``None`` if unknown).
    """

    def __init__(
        self,
        problem: PlacementProblem,
        budget: int | None,
        stall_requests: int | None = None,
        request_multiple: float | None = None,
    ) -> None:
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, np.integer))):
            raise PlacementGymError(
                f"budget must be an integer number of evaluations or None, got {budget!r}"
            )
        if budget is not None:
            if budget < 1:
                raise PlacementGymError(f"budget must be >= 1 evaluation (or None for no limit), got {budget}")
            require_memory(int(budget) * BYTES_PER_EVALUATION, f"budget={budget} (its per-evaluation history)")
        for name, value in (("stall_requests", stall_requests), ("request_multiple", request_multiple)):
            ok = isinstance(value, (int, float, np.integer)) and not isinstance(value, bool)
            if value is not None and not (ok and (value >= 1 or value == 0)):
                raise PlacementGymError(f"{name} must be 0 (off), a number >= 1 or None (default), got {value!r}")
        self.problem = problem
        self.budget = None if budget is None else int(budget)
        self.stall_requests = STALL_REQUESTS if stall_requests is None else int(stall_requests)
        self.request_multiple = REQUEST_MULTIPLE if request_multiple is None else float(request_multiple)
        self._requests_at_start = problem.requests
        self._remote_requests = 0
        self.streak = 0
        self.stalled = False
        self.used = 0
        self.best_latency = float("inf")
        self.best_placement: np.ndarray | None = None
        self.history: list[tuple[int, float]] = []
        self.worker: int | None = None
        self.vector_step: int | None = None
        self.evaluation_s: float | None = None
        #: Called after every evaluation (progress bars, TensorBoard); set by the caller of ``place``.
        self.listeners: list[TrackerListener] = []
        self._detached = False
        self._remote_seen: dict[bytes, None] = {}  # placements recorded from other processes (bounded)
        problem.start_run(self._guard)
        problem.add_listener(self._observe)

    def detach(self) -> None:
        """Stop observing the problem's evaluations and end the run."""
        if not self._detached:
            self._detached = True
            self.problem.remove_listener(self._observe)
            self.problem.end_run(self._guard)

    @property
    def requests(self) -> int:
        """Evaluation requests since the run started, repeats included (see the class docstring)."""
        return self.problem.requests - self._requests_at_start + self._remote_requests

    @property
    def remaining(self) -> int | None:
        """Evaluations left (``None``: no limit)."""
        return None if self.budget is None else max(self.budget - self.used, 0)

    @property
    def exhausted(self) -> bool:
        return self.budget is not None and self.used >= self.budget

    def _guard(self, new: int, requests: int = 1) -> None:
        """Refuse a request of ``requests`` placements, ``new`` of them new, past the budget or the stall
        rule; else count it."""
        if self.budget is not None:
            if self.used + new > self.budget:
                raise BudgetExhaustedError(
                    f"evaluating {new} new placement(s) would exceed the budget of {self.budget} distinct "
                    f"placements ({self.used} used); repeats of evaluated placements stay free"
                )
        self._tally(new, requests)

    def _tally(self, new: int, requests: int) -> None:
        """Count a request of ``requests`` placements, ``new`` of them new, unless it stalls the run."""
        if self.budget is not None:
            self._check_stall(new, requests)
        self.streak = 0 if new else self.streak + requests

    def _check_stall(self, new: int, requests: int) -> None:
        limit = self.request_multiple * self.budget  # type: ignore[operator]
        if self.request_multiple and self.requests + requests > limit:
            self.stalled = True
            raise RunStalledError(
                f"the run stalled: {self.requests + requests} evaluation requests exceed "
                f"{self.request_multiple:g} x its budget of {self.budget} distinct placements ({self.used} used)"
            )
        if not new and self.stall_requests and self.streak + requests > self.stall_requests:
            self.stalled = True
            raise RunStalledError(
                f"the run stalled: {self.streak + requests} evaluation requests in a row without a new "
                f"placement (limit {self.stall_requests}; {self.used} of {self.budget} distinct placements used)"
            )

    def _observe(self, placement: np.ndarray, evaluation: Evaluation) -> None:
        if self._remote_seen and placement.tobytes() in self._remote_seen:
            return  # evaluated in a worker process before: a repeat within the run
        seconds = self.problem.last_evaluation_s  # of this placement: the problem reports right after it
        self._count(placement, evaluation.latency, evaluation.feasible, None, None, seconds)

    def record(
        self,
        placement: np.ndarray,
        latency: float,
        feasible: bool,
        *,
        worker: int | None = None,
        vector_step: int | None = None,
        evaluation_s: float | None = None,
    ) -> bool:
        """Count an evaluation made in another process, unless the run has recorded the placement before.

        ``worker``, ``vector_step`` and ``evaluation_s`` say which env copy made it, in which step of the
        vector env, and the wall seconds its backend spent on it; the listeners read them from the tracker
        (nothing else depends on them).

        Returns:
            True if it was counted (a new placement).
        """
        key = np.asarray(placement, dtype=np.int64).tobytes()
        if key in self._remote_seen or self.problem.seen(placement):
            self._tally(0, 1)
            self._remote_requests += 1
            return False
        self._tally(1, 1)
        self._remote_requests += 1
        self._remote_seen[key] = None
        if len(self._remote_seen) > MEMO_SIZE:
            del self._remote_seen[next(iter(self._remote_seen))]
        self._count(placement, latency, feasible, worker, vector_step, evaluation_s)
        return True

    def _count(
        self,
        placement: np.ndarray,
        latency: float,
        feasible: bool,
        worker: int | None,
        vector_step: int | None,
        evaluation_s: float | None,
    ) -> None:
        self.worker, self.vector_step, self.evaluation_s = worker, vector_step, evaluation_s
        self.used += 1
        if feasible and latency < self.best_latency:
            self.best_latency, self.best_placement = float(latency), np.array(placement, dtype=np.int64)
        self.history.append((self.used, self.best_latency))
        for listener in self.listeners:
            listener(self, placement, latency, feasible)

    def evaluate(self, placement: np.ndarray) -> tuple[float, float]:
        """Evaluate one ``(G,)`` placement: returns ``(latency, reward)`` (free if the run has seen it).

        Raises:
            BudgetExhaustedError: If the placement is new and the budget is spent.
        """
        evaluation = self.problem.evaluate(placement)
        return evaluation.latency, evaluation.reward

    def evaluate_batch(self, placements: np.ndarray) -> list[Evaluation]:
        """Evaluate a ``(B, G)`` batch in one call, cut to the budget.

        The budget pays for placements new to the run (a repeat within the batch or of an earlier
        evaluation is free); rows from the first new placement past the budget on are dropped (the result
        is then shorter than the batch).
        """
        batch = self.problem.validate_batch(placements)
        remaining = self.remaining
        if remaining is not None and len(batch) > remaining:  # fewer rows than the budget left: no cut
            first, _ = first_occurrences(batch)
            new = [i for i in first if not self.problem.seen(batch[i])]
            if len(new) > remaining:
                cut = new[remaining]  # the first row holding the (remaining + 1)-th new placement
                batch = batch[:cut]
        return self.problem.evaluate_batch(batch) if len(batch) else []
