"""A run: one method's search on one problem under a budget of distinct placements.

A :class:`Run` starts a run on the problem (:meth:`~placement_gym.problem.PlacementProblem.start_run`):
until :meth:`Run.detach`, every distinct placement the problem evaluates is counted here, whoever asked
for it (the method, or an RL library through ``env.step``); a repeat is answered from the run's memo and
costs nothing; the problem refuses a new placement past the budget
(:class:`~placement_gym.errors.BudgetExhaustedError`). ``agents.base.BudgetTracker`` is this with the
method's result added.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from placement_gym.errors import BudgetExhaustedError, PlacementGymError
from placement_gym.limits import BYTES_PER_EVALUATION, require_memory
from placement_gym.problem import MEMO_SIZE, Evaluation, PlacementProblem

#: Called as ``fn(tracker, placement, latency, feasible)`` after every evaluation the tracker sees.
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
        budget: Maximum number of distinct placements evaluated; ``None`` for no limit.
    """

    def __init__(self, problem: PlacementProblem, budget: int | None) -> None:
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, np.integer))):
            raise PlacementGymError(
                f"budget must be an integer number of evaluations or None, got {budget!r}"
            )
        if budget is not None:
            if budget < 1:
                raise PlacementGymError(f"budget must be >= 1 evaluation (or None for no limit), got {budget}")
            require_memory(int(budget) * BYTES_PER_EVALUATION, f"budget={budget} (its per-evaluation history)")
        self.problem = problem
        self.budget = None if budget is None else int(budget)
        self.used = 0
        self.best_latency = float("inf")
        self.best_placement: np.ndarray | None = None
        self.history: list[tuple[int, float]] = []
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
    def remaining(self) -> int | None:
        """Evaluations left (``None``: no limit)."""
        return None if self.budget is None else max(self.budget - self.used, 0)

    @property
    def exhausted(self) -> bool:
        return self.budget is not None and self.used >= self.budget

    def _guard(self, new: int) -> None:
        if self.budget is not None and self.used + new > self.budget:
            raise BudgetExhaustedError(
                f"evaluating {new} new placement(s) would exceed the budget of {self.budget} distinct "
                f"placements ({self.used} used); repeats of evaluated placements stay free"
            )

    def _observe(self, placement: np.ndarray, evaluation: Evaluation) -> None:
        if self._remote_seen and placement.tobytes() in self._remote_seen:
            return  # evaluated in a worker process before: a repeat within the run
        self._count(placement, evaluation.latency, evaluation.feasible)

    def record(self, placement: np.ndarray, latency: float, feasible: bool) -> bool:
        """Count an evaluation made in another process, unless the run has recorded the placement before.

        Returns:
            True if it was counted (a new placement).
        """
        key = np.asarray(placement, dtype=np.int64).tobytes()
        if key in self._remote_seen or self.problem.seen(placement):
            return False
        self._remote_seen[key] = None
        if len(self._remote_seen) > MEMO_SIZE:
            del self._remote_seen[next(iter(self._remote_seen))]
        self._count(placement, latency, feasible)
        return True

    def _count(self, placement: np.ndarray, latency: float, feasible: bool) -> None:
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
            _, first = np.unique(batch, axis=0, return_index=True)
            new = np.sort([i for i in first if not self.problem.seen(batch[i])]).astype(np.int64)
            if len(new) > remaining:
                cut = int(new[remaining])  # the first row holding the (remaining + 1)-th new placement
                batch = batch[:cut]
        return self.problem.evaluate_batch(batch) if len(batch) else []
