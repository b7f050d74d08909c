"""Listwise training of the move scorer on whole simulated neighbourhoods.

The classifier of :func:`agents.learned.scorer.fit_scorer` learns from the moves a search happened to
evaluate: few improving moves per placement, chosen by the ranker that collected them. Offline, on the
simulator, every move of a visited placement can be evaluated (one numba batch), so the scorer can be
taught what the search needs: to put the best improving moves of a placement first among all of its
~4,500 candidates. The loss is a listwise softmax cross-entropy (ListNet, Cao et al., "Learning to Rank:
From Pairwise Approach to Listwise Approach", ICML 2007) per placement, over its candidates, with a target
distribution on the improving moves only (:func:`listwise_targets`); the moves that do not improve are
the softmax's denominator, subsampled with weights that keep the denominator unbiased
(:func:`sample_neighbourhood`). The scorer keeps its features and size, so placing costs the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from agents.learned.scorer import IMPROVES, MoveScorer, from_torch, torch_mlp
from placement_gym.errors import PlacementGymError

if TYPE_CHECKING:
    from agents.learned.moves import Moves
    from placement_gym.simulation.schedule import Schedule


@dataclass(frozen=True)
class Neighbourhoods:
    """Moves of several visited placements, the rows of one placement contiguous.

    Attributes:
        features: ``(N, F)`` move features.
        change: ``(N,)`` relative latency change ``new / old - 1`` (infeasible: 1.0).
        weight: ``(N,)`` how many moves of its placement a row stands for (> 1 for sampled rows).
        state: ``(N,)`` index of the placement each row belongs to, non-decreasing.
    """

    features: np.ndarray
    change: np.ndarray
    weight: np.ndarray
    state: np.ndarray

    @classmethod
    def concatenate(cls, parts: list[Neighbourhoods]) -> Neighbourhoods:
        """One set from several, the state indices renumbered to stay distinct."""
        offset, states = 0, []
        for part in parts:
            states.append(part.state + offset)
            offset += int(part.state.max()) + 1 if len(part.state) else 0
        return cls(
            np.concatenate([p.features for p in parts]),
            np.concatenate([p.change for p in parts]),
            np.concatenate([p.weight for p in parts]),
            np.concatenate(states) if states else np.zeros(0, dtype=np.int64),
        )


def simulated_changes(schedule: Schedule, placement: np.ndarray, latency: float, moves: Moves) -> np.ndarray:
    """Every move of ``moves`` from ``placement`` (latency ``latency``) simulated in one batch: the relative
    latency changes ``(K,)``, ``1.0`` for a move that breaks memory or has no finite latency."""
    lat, over, _ = schedule.run_batch(moves.apply_all(placement))
    return np.where((over < 0) & np.isfinite(lat), lat / latency - 1.0, 1.0)


def sample_neighbourhood(
    features: np.ndarray,
    change: np.ndarray,
    negatives: int,
    rng: np.random.Generator,
    scores: np.ndarray | None = None,
    hard: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every improving move of one placement, the ``hard`` others a ranker puts first (lowest ``scores``:
    the attractive moves that do not improve) and at most ``negatives`` of the rest (uniformly), each of
    those weighted by ``rest / kept``.

    Returns:
        ``(features, change, weight)`` of the kept rows.
    """
    improving = change < -IMPROVES
    others = np.flatnonzero(~improving)
    top = np.zeros(0, dtype=np.int64)
    if hard and scores is not None and len(others):
        top = others[np.argsort(scores[others], kind="stable")[:hard]]
        others = np.setdiff1d(others, top)
    kept = others if len(others) <= negatives else rng.choice(others, size=negatives, replace=False)
    rows = np.concatenate([np.flatnonzero(improving), np.sort(top), np.sort(kept)])
    weight = np.ones(len(rows))
    weight[improving.sum() + len(top) :] = len(others) / max(len(kept), 1)
    return features[rows], change[rows], weight


def listwise_targets(change: np.ndarray, state: np.ndarray, temperature: float) -> np.ndarray:
    """Target probability of each row within its placement, shape ``(N,)``.

    Improving moves get ``exp((gain / best gain - 1) / temperature)``, normalised per placement (the best
    move the most, one of half its gain ``exp(-0.5 / temperature)`` as much); the others 0. Placements
    with no improving move get all zeros (they teach nothing about the order).
    """
    if temperature <= 0:
        raise PlacementGymError(f"temperature must be > 0, got {temperature}")
    gain = np.where(change < -IMPROVES, -change, 0.0)
    best = np.zeros(int(state.max()) + 1 if len(state) else 0)
    np.maximum.at(best, state, gain)
    raw = np.where(gain > 0, np.exp((gain / np.maximum(best[state], 1e-30) - 1.0) / temperature), 0.0)
    total = np.bincount(state, raw, len(best))
    return np.where(raw > 0, raw / np.maximum(total[state], 1e-300), 0.0)


def fit_listwise(
    data: Neighbourhoods,
    hidden: int = 32,
    epochs: int = 30,
    seed: int = 0,
    lr: float = 3e-3,
    temperature: float = 0.5,
    states_per_batch: int = 32,
    init: MoveScorer | None = None,
) -> tuple[MoveScorer, float]:
    """Fit a :class:`MoveScorer` whose order (lowest score first) puts each placement's best improving
    moves first: Adam on the listwise softmax cross-entropy, minibatches of ``states_per_batch``
    placements. Placements without an improving move are dropped.

    Returns:
        ``(scorer, mean loss per placement of the last epoch)``.
    """
    import torch

    target = listwise_targets(data.change, data.state, temperature)
    useful = np.bincount(data.state, target > 0) > 0
    keep = useful[data.state]
    if not keep.any():
        raise PlacementGymError("no placement of the data has an improving move: nothing to rank")
    x = np.asarray(data.features[keep], dtype=np.float64)
    _, state = np.unique(data.state[keep], return_inverse=True)
    state = state.reshape(-1)
    n_states = int(state.max()) + 1
    ptr = np.concatenate([[0], np.cumsum(np.bincount(state, minlength=n_states))])
    torch.manual_seed(seed)
    mean, std = (init.mean, init.std) if init is not None else (x.mean(axis=0), x.std(axis=0) + 1e-6)
    xt = torch.tensor((x - mean) / std, dtype=torch.float32)
    qt = torch.tensor(target[keep], dtype=torch.float32)
    log_w = torch.tensor(np.log(data.weight[keep]), dtype=torch.float32)
    net = torch_mlp(x.shape[1], hidden, init)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    losses: list[float] = []
    for _ in range(epochs):
        losses = []
        for chunk in np.array_split(rng.permutation(n_states), max(n_states // states_per_batch, 1)):
            lengths = ptr[chunk + 1] - ptr[chunk]
            starts = np.repeat(ptr[chunk] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
            idx = torch.from_numpy(starts + np.arange(lengths.sum()))
            local = torch.from_numpy(np.repeat(np.arange(len(chunk)), lengths))
            logits = -net(xt[idx])[:, 0]  # lower score: tried first
            shifted = logits + log_w[idx]
            top = torch.zeros(len(chunk)).scatter_reduce(
                0, local, shifted.detach(), "amax", include_self=False
            )
            lse = (
                torch.log(torch.zeros(len(chunk)).index_add(0, local, torch.exp(shifted - top[local]))) + top
            )
            loss = (lse - torch.zeros(len(chunk)).index_add(0, local, qt[idx] * logits)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return from_torch(net, mean, std), float(np.mean(losses))
