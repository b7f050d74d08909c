"""Guided improvement (``guided_improvement``): a learned move scorer steering an improvement search.

In the spirit of GiPH (Hu et al., "GiPH: Generalizable Placement Learning for Adaptive Heterogeneous
Computing", MLSys 2023): a placement is improved one move at a time, starting from HEFT, and a policy
trained across many graphs and platforms picks which ``(groups, device)`` move to try, from features that
carry over to unseen graphs and platforms. At inference the policy's ranking is used as guided search:
the top moves are evaluated in batches (one ``evaluate_batch`` each), the best improving one is kept.

What is learned and what is search:

* **Learned**: :class:`~agents.learned.scorer.MoveScorer`, a 2-layer MLP over per-move features computed
  from the cost model and the current placement (:data:`agents.learned.moves.MOVE_FEATURES`: compute and
  transfer change weighted by criticality, launch overheads, loads, move size and kind, and the change of
  a queue-free latency estimate of the whole placement). It is trained offline by
  ``python -m experiments.pretraining.guided_improvement --objective listwise`` on simulated improvement episodes over zoo
  models on randomly perturbed platforms (DAgger-style rounds): at every placement an episode ranks, all
  of its ~4,500 moves are simulated (offline, outside any task's budget) and the scorer is fitted with a
  listwise ranking loss (:mod:`agents.learned.listwise`) to put the best improving moves first, with the
  moves the previous round's scorer ranked first among those that do not improve kept as hard negatives.
  Its weights ship in ``agents/learned/pretrained``. A second scorer of the same size, trained listwise on
  the same platforms plus the memory-bound ``model-parallel``, ships in ``agents/learned/pretrained-memory``;
  by default the method takes it when memory binds (:func:`memory_binds`: no device can hold all the
  weights) and the first one otherwise (a hard gate on one platform descriptor: each scorer alone trades
  one platform for the other).
  Nothing is learned while placing unless ``fine_tune=N``: then the scorer is refitted once, from its
  pretrained weights and with the listwise loss, on the first ``N`` moves evaluated on the problem (grouped
  by the placement they were ranked at; within the budget).
* **Search** (:func:`agents.learned.search.guided_search`): the start (best of HEFT and the single
  devices), the move kinds (single groups, twin classes, segments, windows, fork-join branches), batching,
  acceptance (best of the first improving batch), a tabu list of moves that did not improve, and an
  iterated local search past local optima: a placement counts as exhausted once its ``depth`` best-ranked
  moves hold no improvement; the search then walks to its best evaluated neighbour if that is within
  ``walk`` of the best latency, else perturbs the best placement.

Deviations from GiPH: the scorer is an MLP over hand-designed move features, not a GNN over the
placement-device graph; it is trained by supervised ranking of simulated moves (a one-step, gamma = 0
criterion), not by REINFORCE over episodes; moves can move several groups at
once; and at inference many moves are evaluated per step, not one sampled.

Ablations (same search, other orders): ``ranker="random"`` (uniform), ``ranker="cost"`` (a hand-written
order from the same features) and ``ranker="estimate"`` (the order of the queue-free estimate feature
alone), see ``experiments/records/learned_vs_search.py``; ``weights=agents/learned/pretrained`` is the
method with one scorer for every platform; ``depth=0,walk=0`` is the search of the third pass (every
ranked move tried, random kicks only), ``tabu="local"`` a variant whose tabu moves are tried again once
their part of the graph has changed, and ``tabu="local",late=5,late_after=2`` that variant with late
acceptance (Burke & Bykov, EJOR 2017) from the second exhausted placement on: steadier on Inception-V3
under perturbed scores, but worse after fine-tuning on ViT-B/16 / ``multi-accel`` (``docs/research-notes.md``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agents.base import BudgetTracker, PlacementMethod
from agents.learned.fine_tuning import FineTuningScorer
from agents.learned.scorer import PRETRAINED, PRETRAINED_MEMORY, MoveScorer
from agents.learned.search import CostRanker, EstimateRanker, MoveRanker, RandomRanker, guided_search
from placement_gym.errors import UnknownNameError
from placement_gym.simulation.cost_model import CostModel

DEFAULT_BUDGET = 500
RANKERS = ("learned", "cost", "estimate", "random")
TABUS = ("local", "global")


def memory_binds(cost: CostModel) -> bool:
    """Whether no device of the platform can hold the weights of every group (so memory shapes the
    placement)."""
    return bool(cost.param_bytes.sum() > cost.capacity.max())


class GuidedImprovement(PlacementMethod):
    """Improvement search ordered by a pretrained move scorer (see the module docstring).

    Args:
        budget: Evaluations when :meth:`place` gets ``budget=None``.
        ranker: ``"learned"`` (the scorer in ``weights``), or the ablations ``"cost"``, ``"estimate"`` and
            ``"random"``.
        weights: Folder of a saved :class:`~agents.learned.scorer.MoveScorer`, used on every problem
            (default: the shipped ones, ``pretrained-memory`` where :func:`memory_binds`, else ``pretrained``).
        batch_size: Moves evaluated per call.
        kick: Random moves applied to the best placement when a neighbourhood is exhausted.
        fine_tune: If > 0, refit the scorer once on the first ``fine_tune`` moves evaluated on this
            problem (from the pretrained weights; those evaluations count against the budget).
        tabu: ``"local"``: a move that did not improve is tried last until a group of it or a graph
            neighbour of one moves; ``"global"``: for the rest of the search.
        depth: Ranked moves tried per placement before it counts as exhausted (0: all of them).
        walk: Step to an exhausted placement's best evaluated neighbour if within this fraction of the
            best latency (0: always kick the best placement instead).
        late: Late acceptance over this many batches (0: off): once ``late_after`` placements are
            exhausted, a batch without an improvement moves to its best neighbour if that is no slower
            than the current latency ``late`` batches ago.
        late_after: Exhausted placements before late acceptance starts.
    """

    name = "guided_improvement"
    track = "white-box"  # reads the cost model

    def __init__(
        self,
        budget: int = DEFAULT_BUDGET,
        ranker: str = "learned",
        weights: str | Path | None = None,
        batch_size: int = 4,
        kick: int = 2,
        fine_tune: int = 0,
        tabu: str = "global",
        depth: int = 96,
        walk: float = 0.02,
        late: int = 0,
        late_after: int = 1,
    ) -> None:
        if ranker not in RANKERS:
            raise UnknownNameError("move ranker", ranker, RANKERS)
        if tabu not in TABUS:
            raise UnknownNameError("tabu rule", tabu, TABUS)
        if depth < 0 or walk < 0 or late < 0 or late_after < 0:
            raise ValueError(
                f"depth, walk, late and late_after must be >= 0, got {depth}, {walk}, {late}, {late_after}"
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if fine_tune < 0 or (fine_tune and ranker != "learned"):
            raise ValueError(
                f"fine_tune must be >= 0 and needs ranker='learned', got {fine_tune}, {ranker!r}"
            )
        self.budget, self.ranker, self.batch_size, self.kick = budget, ranker, int(batch_size), int(kick)
        self.fine_tune = int(fine_tune)
        self.tabu, self.depth, self.walk = tabu, int(depth), float(walk)
        self.late, self.late_after = int(late), int(late_after)
        self.weights = Path(weights) if weights is not None else None
        self._scorers: dict[bool, MoveScorer] = {}
        if ranker == "learned":
            paths = (
                {False: self.weights, True: self.weights}
                if self.weights
                else {False: PRETRAINED, True: PRETRAINED_MEMORY}
            )
            self._scorers = {binds: MoveScorer.load(path) for binds, path in paths.items()}

    def ranker_for(self, rng: np.random.Generator, cost: CostModel) -> MoveRanker:
        """The move ranker this method uses on ``cost``: the scorer :func:`memory_binds` picks, or an
        ablation."""
        if self.ranker == "learned":
            scorer = self._scorers[memory_binds(cost)]
            return FineTuningScorer(scorer, self.fine_tune) if self.fine_tune else scorer
        if self.ranker == "estimate":
            return EstimateRanker()
        return CostRanker() if self.ranker == "cost" else RandomRanker(rng)

    def search(self, tracker: BudgetTracker, ranker: MoveRanker, rng: np.random.Generator) -> dict[str, int]:
        """:func:`~agents.learned.search.guided_search` with this method's search options and ``ranker``."""
        return guided_search(
            tracker,
            ranker,
            rng,
            self.batch_size,
            self.kick,
            local_tabu=self.tabu == "local",
            depth=self.depth or None,
            walk=self.walk,
            late=self.late,
            late_after=self.late_after,
        )

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        if tracker.budget is None:
            tracker.budget = self.budget
        rng = np.random.default_rng(seed)
        return self.search(tracker, self.ranker_for(rng, tracker.problem.cost_model()), rng)
