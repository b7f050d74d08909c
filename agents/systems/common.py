"""Building blocks shared by the reimplemented learning systems (HSDAG, RL placement, grouper-placer, Placeto).

* :func:`graph_tensors` / :func:`op_tensors`: a problem's group graph (or its op graph) as torch tensors,
  with the observation's scale-free static features (:mod:`placement_gym.features`).
* :func:`seeded_module` and :func:`make_generator`: all randomness of a method comes from its ``seed``;
  nothing touches torch's global generator.
* :func:`sample_categorical`: masked categorical sampling with log-probabilities and entropies.
* :class:`SampleBatch`, :class:`MovingAverageBaseline`, :class:`DiscountedReturn`, :func:`reinforce`: the
  REINFORCE loop driven by the evaluation budget. Sampled placements are evaluated through the
  :class:`~agents.base.BudgetTracker` in one batch per update; on a deterministic problem a placement
  already evaluated in the run is looked up, not paid for again, so the budget buys distinct placements.
  Each update records whether it collapsed (all samples identical or their rewards tied); the fraction
  of collapsed updates is part of every learning system's result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from agents.base import BudgetTracker
from placement_gym.coarsening import coarsen_ops
from placement_gym.features import static_features
from placement_gym.problem import PlacementProblem

#: HSDAG's published training budget: 25 episodes x 20 placements.
DEFAULT_BUDGET = 500


@dataclass(frozen=True)
class GraphTensors:
    """A graph as torch tensors.

    Attributes:
        x: Node features, ``(n, F)`` float32.
        edge_index: ``(2, m)`` int64, ``[source; target]``, sources before targets in topological order.
        edge_attr: ``(m, 1)`` float32, scaled log bytes of each edge.
        device_mask: ``(n, D)`` bool, devices that may hold each node (all True for op graphs).
    """

    x: torch.Tensor
    edge_index: torch.Tensor
    edge_attr: torch.Tensor
    device_mask: torch.Tensor

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_devices(self) -> int:
        return int(self.device_mask.shape[1])


def graph_tensors(problem: PlacementProblem) -> GraphTensors:
    """The problem's group (quotient) graph: ``G`` nodes with the observation's static features."""
    f = problem.features
    return GraphTensors(
        x=torch.as_tensor(np.array(f.node_features)),
        edge_index=torch.as_tensor(np.array(f.edge_index)),
        edge_attr=torch.as_tensor(np.array(f.edge_features)),
        device_mask=torch.as_tensor(np.array(problem.device_mask)),
    )


def op_tensors(problem: PlacementProblem) -> GraphTensors:
    """The problem's op graph (``problem.coarse.ops``, ``n`` ops) with the group features' definitions."""
    ops = coarsen_ops(problem.coarse.ops)
    n, m = ops.num_groups, ops.graph.num_edges
    s = static_features(ops, n, m)
    return GraphTensors(
        x=torch.as_tensor(np.array(s.node_features)),
        edge_index=torch.as_tensor(np.array(s.edge_index)),
        edge_attr=torch.as_tensor(np.array(s.edge_features)),
        device_mask=torch.ones(n, problem.num_devices, dtype=torch.bool),
    )


def make_generator(seed: int) -> torch.Generator:
    """A private CPU generator seeded with ``seed`` (for sampling)."""
    gen = torch.Generator()
    gen.manual_seed(int(seed))
    return gen


def seeded_module(factory: Callable[[], nn.Module], seed: int) -> nn.Module:
    """Build a module whose initial weights depend only on ``seed``, leaving torch's global RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return factory()


@contextmanager
def torch_threads(num_threads: int) -> Iterator[None]:
    """Run torch on ``num_threads`` intra-op threads, restoring the previous setting afterwards.

    The policies here are small (tens of units, hundreds of nodes): with more than one thread, and
    especially on a shared machine, thread synchronisation costs up to 20x the arithmetic.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(int(num_threads))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class DivergedError(ArithmeticError):
    """A policy produced non-finite logits (its parameters or activations overflowed)."""


def sample_categorical(
    logits: torch.Tensor,
    generator: torch.Generator,
    mask: torch.Tensor | None = None,
    greedy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample one category per row.

    Args:
        logits: ``(..., C)`` unnormalised scores.
        generator: Source of randomness.
        mask: ``(..., C)`` bool (broadcastable), False = forbidden; every row needs a True.
        greedy: Take the argmax instead of sampling.

    Returns:
        ``(actions, log_prob, entropy)``, each of shape ``(...)``; ``actions`` is int64.

    Raises:
        DivergedError: If ``logits`` holds a NaN or an infinity.
    """
    if not torch.isfinite(logits).all():
        raise DivergedError("the policy's logits are not finite: training diverged")
    if mask is not None:
        logits = logits.masked_fill(~mask, -1e9)
    logp = torch.log_softmax(logits, dim=-1)
    probs = logp.exp()
    flat = probs.detach().reshape(-1, probs.shape[-1])
    if greedy:
        actions = flat.argmax(dim=-1)
    else:
        actions = torch.multinomial(flat, 1, generator=generator).squeeze(-1)
    actions = actions.reshape(probs.shape[:-1])
    chosen = logp.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    entropy = -(probs * logp).sum(-1)
    return actions, chosen, entropy


@dataclass
class SampleBatch:
    """``k`` placements sampled from a policy, with what REINFORCE needs to update it.

    Attributes:
        placements: ``(k, G)`` int64 group placements to evaluate.
        log_prob: ``(k,)`` log-probability of each sample under the policy (with grad), or ``None`` if
            :meth:`backward` is overridden (e.g. recomputed in chunks).
        entropy: ``(k,)`` entropy of the sampling distributions along each sample (with grad), or ``None``.
    """

    placements: np.ndarray
    log_prob: torch.Tensor | None = None
    entropy: torch.Tensor | None = None

    def backward(self, advantages: torch.Tensor, entropy_coef: float) -> float:
        """Accumulate the gradient of ``-mean(adv * log_prob) - entropy_coef * mean(entropy)``.

        Args:
            advantages: ``(k,)`` float32, no grad.
            entropy_coef: Weight of the entropy bonus.

        Returns:
            The loss value.
        """
        loss = -(advantages * self.log_prob).mean()
        if self.entropy is not None and entropy_coef:
            loss = loss - entropy_coef * self.entropy.mean()
        loss.backward()
        return float(loss.detach())


def is_tied(rewards: np.ndarray, rtol: float = 1e-9) -> bool:
    """True if the rewards of a batch are equal up to ``rtol`` of their magnitude: no learning signal."""
    rewards = np.asarray(rewards, dtype=np.float64)
    scale = float(np.abs(rewards).max()) if rewards.size else 0.0
    return bool(rewards.size < 2 or np.ptp(rewards) <= rtol * max(scale, 1e-300))


class MovingAverageBaseline:
    """Reward baseline of REINFORCE: a moving average, or the batch mean when advantages are normalised.

    Without normalisation the advantage is ``r - b`` with ``b`` an exponential moving average of the batch
    mean rewards (Mirhoseini et al. 2017; TensorFlow's controller starts ``b`` at the failing signal), so
    a batch is judged against the recent past. With normalisation the advantage is
    ``(r - mean(r)) / max(std(r), min_spread * |mean(r)|)``: the batch mean (not a lagging average) keeps
    the advantages centred, the floor on the spread keeps near-ties from being blown up, and a tied batch
    (all rewards equal) gets zero advantage. Either way the advantages are bounded by the rewards' scale.

    Args:
        decay: Weight of the past, in ``[0, 1)`` (moving average only); 0 gives the batch mean.
        normalize: Centre on the batch mean and divide by the (floored) spread.
        init: Starting value of the moving average (``None``: the first batch's mean).
        min_spread: Floor of the spread, relative to ``|mean(r)|`` (normalised advantages only).
        per_sample: Move the average after every sample, in batch order, each sample judged against the
            average before it (TensorFlow's controller, which updates after every sample); otherwise once
            per batch, with its mean.
    """

    def __init__(
        self,
        decay: float = 0.9,
        normalize: bool = True,
        init: float | None = None,
        min_spread: float = 1e-3,
        per_sample: bool = False,
    ) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"baseline decay must lie in [0, 1), got {decay}")
        if min_spread < 0:
            raise ValueError(f"min_spread must be >= 0, got {min_spread}")
        if per_sample and normalize:
            raise ValueError("per_sample applies to the moving average (normalize=False)")
        self.decay, self.normalize, self.min_spread, self.per_sample = (
            decay,
            normalize,
            min_spread,
            per_sample,
        )
        self.value: float | None = init

    def advantages(self, rewards: np.ndarray) -> np.ndarray:
        """Advantages of a ``(k,)`` batch of rewards (before the moving average absorbs it)."""
        rewards = np.asarray(rewards, dtype=np.float64)
        mean = float(rewards.mean())
        if self.normalize:
            if is_tied(rewards):
                adv = np.zeros_like(rewards)
            else:
                spread = max(float(rewards.std()), self.min_spread * abs(mean), 1e-12)
                adv = (rewards - mean) / spread
        elif self.per_sample:
            adv = np.empty_like(rewards)
            for i, r in enumerate(rewards):
                base = r if self.value is None else self.value
                adv[i] = r - base
                self.value = self.decay * base + (1 - self.decay) * r
            return adv
        else:
            adv = rewards - (mean if self.value is None else self.value)
        self.value = mean if self.value is None else self.decay * self.value + (1 - self.decay) * mean
        return adv


class DiscountedReturn:
    """HSDAG's weighting (Duan et al. 2024, released code): no baseline; every sample of an episode is
    weighted by the episode's discounted return ``sum_t gamma**(K-1-t) * r_t`` (``r_t``: the ``t``-th
    sample's reward, the last one undiscounted).

    Args:
        gamma: Discount rate (the released code: 0.95).
    """

    def __init__(self, gamma: float = 0.95) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"discount rate must lie in [0, 1], got {gamma}")
        self.gamma = gamma

    def advantages(self, rewards: np.ndarray) -> np.ndarray:
        rewards = np.asarray(rewards, dtype=np.float64)
        weights = self.gamma ** np.arange(len(rewards))[::-1]
        return np.full_like(rewards, float((weights * rewards).sum()))


def budget_of(tracker: BudgetTracker, default: int) -> int:
    """The evaluations a method may spend: the tracker's budget, else the method's default."""
    budget = tracker.budget if tracker.budget is not None else default
    if budget < 1:
        raise ValueError(f"budget must be >= 1 evaluation, got {budget}")
    return int(budget)


Baseline = MovingAverageBaseline | DiscountedReturn


class _KnownRewards:
    """Rewards of placements already evaluated in this run, for deterministic problems.

    A deterministic backend gives a placement the same latency every time, so re-evaluating a placement
    the policy samples again would spend budget on nothing new: its reward is looked up instead, and the
    budget pays for distinct placements only.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.latency: dict[bytes, float] = {}
        self.reward: dict[bytes, float] = {}

    def evaluate(
        self, tracker: BudgetTracker, placements: np.ndarray, limit: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """``(latency (k,), env reward (k,), evaluated mask (k,), new evaluations)`` of a ``(k, G)`` batch.

        At most ``limit`` new placements are evaluated; rows holding later ones get mask False.
        """
        k = len(placements)
        keys = [row.tobytes() for row in placements]
        latency, reward = np.full(k, np.nan), np.full(k, np.nan)
        unknown, seen = [], set()
        for i, key in enumerate(keys):
            if self.enabled and key in self.reward:
                continue
            if key not in seen and len(seen) == limit:
                break  # the (limit + 1)-th new placement: this row and all later ones wait
            seen.add(key)
            unknown.append(i)
        used = tracker.used
        evaluations = tracker.evaluate_batch(placements[unknown]) if unknown else []
        for i, e in zip(unknown, evaluations):
            latency[i], reward[i] = e.latency, e.reward
            if self.enabled:
                self.latency[keys[i]], self.reward[keys[i]] = e.latency, e.reward
        for i, key in enumerate(keys):
            if self.enabled and np.isnan(reward[i]) and key in self.reward:
                latency[i], reward[i] = self.latency[key], self.reward[key]
        return latency, reward, ~np.isnan(reward), tracker.used - used


def reinforce(
    tracker: BudgetTracker,
    budget: int,
    sample: Callable[[int], SampleBatch],
    optimizer: torch.optim.Optimizer,
    samples_per_update: int = 20,
    reward: Callable[[np.ndarray, float, float], float] | None = None,
    baseline: Baseline | None = None,
    entropy_coef: float = 0.0,
    max_grad_norm: float | None = 1.0,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    reuse_known: bool | None = None,
    max_idle_updates: int = 50,
) -> list[dict[str, float]]:
    """REINFORCE until ``budget`` evaluations are spent: sample, evaluate the new placements, update.

    Args:
        tracker: Counts and evaluates placements.
        budget: Total evaluations this loop may reach (``tracker.used`` never exceeds it).
        sample: ``sample(k)`` draws ``k`` placements from the current policy.
        optimizer: Optimizer of the policy's parameters.
        samples_per_update: ``K``, placements per policy update (the last update may use fewer).
        reward: ``reward(placement, latency, env_reward) -> float`` to maximise; default: the problem's
            reward.
        baseline: Turns a batch's rewards into advantages (default: batch-normalised, see
            :class:`MovingAverageBaseline`).
        entropy_coef: Weight of the entropy bonus.
        max_grad_norm: Gradient-norm clip (``None``: no clipping).
        scheduler: Learning-rate schedule, stepped once per update.
        reuse_known: Look up the rewards of placements already evaluated in this run instead of spending
            budget on them again (default: when the problem is deterministic).
        max_idle_updates: Stop after this many consecutive updates that evaluate nothing new (a policy
            that only samples known placements); the result then spends less than ``budget``.

    A policy whose logits stop being finite ends the loop: the curve's last entry is then
    ``{"update", "evaluations", "diverged": 1.0}``.

    Returns:
        The training curve: one dict per update (``update``, ``evaluations``, ``new`` placements evaluated,
        ``distinct`` placements in the batch, ``collapsed`` (1.0 if all samples were identical or their
        rewards tied, so the update carried no comparison), ``mean_reward``, ``max_reward``,
        ``best_latency``, ``loss``). :func:`collapsed_fraction` summarises it.
    """
    if samples_per_update < 1:
        raise ValueError(f"samples_per_update must be >= 1, got {samples_per_update}")
    baseline = baseline or MovingAverageBaseline()
    known = _KnownRewards(tracker.problem.deterministic if reuse_known is None else reuse_known)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    curve: list[dict[str, float]] = []
    idle = 0
    while tracker.used < budget and idle < max_idle_updates:
        k = samples_per_update if known.enabled else min(samples_per_update, budget - tracker.used)
        try:
            batch = sample(k)
        except DivergedError:
            curve.append(dict(update=len(curve), evaluations=tracker.used, diverged=1.0))
            break
        latency, env_reward, ok, new = known.evaluate(tracker, batch.placements, budget - tracker.used)
        idle = 0 if new else idle + 1
        rewards = np.array(
            [
                r if reward is None else reward(p, lat, r)
                for p, lat, r in zip(batch.placements[ok], latency[ok], env_reward[ok])
            ],
            dtype=np.float64,
        )
        distinct = len(np.unique(batch.placements[ok], axis=0))
        collapsed = distinct < 2 or is_tied(rewards)
        optimizer.zero_grad()
        loss = 0.0
        if len(rewards):
            adv = np.zeros(k)
            adv[ok] = baseline.advantages(rewards)
            loss = batch.backward(torch.as_tensor(adv, dtype=torch.float32), entropy_coef)
            if max_grad_norm is not None:
                nn.utils.clip_grad_norm_(params, max_grad_norm)
            optimizer.step()
        if scheduler is not None:
            scheduler.step()
        curve.append(
            dict(
                update=len(curve),
                evaluations=tracker.used,
                new=new,
                distinct=distinct,
                collapsed=float(collapsed),
                mean_reward=float(rewards.mean()) if len(rewards) else float("nan"),
                max_reward=float(rewards.max()) if len(rewards) else float("nan"),
                best_latency=tracker.best_latency,
                loss=loss,
            )
        )
    return curve


def collapsed_fraction(curve: list[dict[str, float]]) -> float:
    """Share of the updates of a :func:`reinforce` curve that were collapsed (identical samples or tied
    rewards); 0.0 for an empty curve."""
    updates = [p["collapsed"] for p in curve if "collapsed" in p]
    return float(np.mean(updates)) if updates else 0.0


def training_extras(curve: list[dict[str, float]], tracker: BudgetTracker, budget: int) -> dict[str, Any]:
    """The facts every learning system reports in ``PlacementResult.extra``."""
    return {
        "curve": curve,
        "updates": sum("collapsed" in p for p in curve),
        "collapsed_fraction": collapsed_fraction(curve),
        "stopped_early": tracker.used < budget,
        "diverged": bool(curve and curve[-1].get("diverged")),
    }
