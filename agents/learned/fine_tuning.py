"""Fine-tuning a pretrained move scorer on the problem at hand, with the loss it was pretrained with."""

from __future__ import annotations

import numpy as np

from agents.learned.listwise import Neighbourhoods, fit_listwise
from agents.learned.moves import Moves
from agents.learned.scorer import IMPROVES, MoveScorer, fit_scorer
from placement_gym.errors import UnknownNameError


class FineTuningScorer:
    """A pretrained :class:`MoveScorer` fine-tuned once on the moves of the problem at hand.

    The first ``after`` evaluated moves are ranked by the pretrained scorer and kept, grouped by the
    placement whose ranking they came from; then the scorer is refitted from its pretrained weights on them
    (``epochs`` passes, learning rate ``lr``) with the loss it was pretrained with: the listwise loss of
    :func:`agents.learned.listwise.fit_listwise` over each placement's evaluated moves (``objective=
    "listwise"``; placements with no improving evaluated move teach nothing, and if none has one the
    pretrained scorer is kept), or the classification of :func:`~agents.learned.scorer.fit_scorer`
    (``"improve"``). The evaluations spent before the refit are part of the method's budget.
    """

    def __init__(
        self,
        base: MoveScorer,
        after: int = 100,
        epochs: int = 20,
        lr: float = 1e-4,
        objective: str = "listwise",
    ) -> None:
        if objective not in ("listwise", "improve"):
            raise UnknownNameError("fine-tuning objective", objective, ("listwise", "improve"))
        self.scorer, self.after, self.epochs, self.lr = base, int(after), int(epochs), float(lr)
        self.objective = objective
        self._x: list[np.ndarray] = []
        self._y: list[np.ndarray] = []
        self._state: list[np.ndarray] = []
        self._rankings = 0
        self.tuned = False

    def scores(self, features: np.ndarray, moves: Moves) -> np.ndarray:
        self._rankings += 1  # the search ranks each placement once, then evaluates its moves
        return self.scorer.predict(features)

    def observe(self, features: np.ndarray, change: np.ndarray) -> None:
        if self.tuned:
            return
        self._x.append(np.asarray(features))
        self._y.append(np.asarray(change))
        self._state.append(np.full(len(change), self._rankings, dtype=np.int64))
        if sum(len(y) for y in self._y) >= self.after:
            x, y = np.concatenate(self._x), np.concatenate(self._y)
            if self.objective == "improve":
                self.scorer, _ = fit_scorer(x, y, epochs=self.epochs, init=self.scorer, lr=self.lr)
            elif np.any(y < -IMPROVES):
                data = Neighbourhoods(x, y, np.ones(len(y)), np.concatenate(self._state))
                hidden = self.scorer.layers[0][0].shape[1]
                self.scorer, _ = fit_listwise(
                    data, hidden=hidden, epochs=self.epochs, lr=self.lr, init=self.scorer, states_per_batch=4
                )
            self.tuned = True
