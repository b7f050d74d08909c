"""Building blocks shared by the reimplemented learning systems (HSDAG, RL placement, grouper-placer, Placeto).

* :func:`graph_tensors` / :func:`op_tensors`: a problem's group graph (or its op graph) as torch tensors,
  with the observation's scale-free static features (:mod:`placement_gym.features`).
* :func:`seeded_module` and :func:`make_generator`: all randomness of a method comes from its ``seed``;
  nothing touches torch's global generator.
* :func:`sample_categorical`: masked categorical sampling with log-probabilities and entropies.
* :class:`SampleBatch`, :class:`MovingAverageBaseline`, :func:`reinforce`: the REINFORCE loop driven by
  the evaluation budget. Every sampled placement is evaluated through the :class:`~agents.base.BudgetTracker`,
  so the number of policy samples equals the number of evaluations spent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

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
    """
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


class MovingAverageBaseline:
    """Exponential moving average of rewards (Mirhoseini et al. 2017); starts at the first batch's mean.

    Args:
        decay: Weight of the past, in ``[0, 1)``; 0 gives the batch-mean baseline.
        normalize: Divide advantages by the batch's reward standard deviation (scale-free step sizes).
    """

    def __init__(self, decay: float = 0.9, normalize: bool = True) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"baseline decay must lie in [0, 1), got {decay}")
        self.decay, self.normalize = decay, normalize
        self.value: float | None = None

    def advantages(self, rewards: np.ndarray) -> np.ndarray:
        """Advantages of a ``(k,)`` batch of rewards (before the baseline absorbs it)."""
        rewards = np.asarray(rewards, dtype=np.float64)
        mean = float(rewards.mean())
        base = mean if self.value is None else self.value
        adv = rewards - base
        if self.normalize and len(rewards) > 1:
            adv = adv / (float(rewards.std()) + 1e-8)
        self.value = mean if self.value is None else self.decay * self.value + (1 - self.decay) * mean
        return adv


def budget_of(tracker: BudgetTracker, default: int) -> int:
    """The evaluations a method may spend: the tracker's budget, else the method's default."""
    budget = tracker.budget if tracker.budget is not None else default
    if budget < 1:
        raise ValueError(f"budget must be >= 1 evaluation, got {budget}")
    return int(budget)


def reinforce(
    tracker: BudgetTracker,
    budget: int,
    sample: Callable[[int], SampleBatch],
    optimizer: torch.optim.Optimizer,
    samples_per_update: int = 20,
    reward: Callable[[float, float], float] | None = None,
    baseline: MovingAverageBaseline | None = None,
    entropy_coef: float = 0.0,
    max_grad_norm: float = 1.0,
) -> list[dict[str, float]]:
    """REINFORCE until ``budget`` evaluations are spent: sample, evaluate each sample once, update.

    Args:
        tracker: Counts and evaluates placements (one evaluation per sampled placement).
        budget: Total evaluations this loop may reach (``tracker.used`` never exceeds it).
        sample: ``sample(k)`` draws ``k`` placements from the current policy.
        optimizer: Optimizer of the policy's parameters.
        samples_per_update: ``K``, placements per policy update (the last update may use fewer).
        reward: ``reward(latency, env_reward) -> float`` to maximise; default: the env's reward.
        baseline: Reward baseline (default: moving average with decay 0.9).
        entropy_coef: Weight of the entropy bonus.
        max_grad_norm: Gradient-norm clip.

    Returns:
        The training curve: one dict per update (``update``, ``evaluations``, ``mean_reward``,
        ``max_reward``, ``best_latency``, ``loss``).
    """
    if samples_per_update < 1:
        raise ValueError(f"samples_per_update must be >= 1, got {samples_per_update}")
    baseline = baseline or MovingAverageBaseline()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    curve: list[dict[str, float]] = []
    while tracker.used < budget:
        k = min(samples_per_update, budget - tracker.used)
        batch = sample(k)
        evaluations = tracker.evaluate_batch(batch.placements)  # one call: parallel on pooled backends
        rewards = np.array(
            [e.reward if reward is None else reward(e.latency, e.reward) for e in evaluations], dtype=np.float64
        )
        optimizer.zero_grad()
        loss = 0.0
        if k > 1:  # a single sample carries no learning signal against its own batch
            adv = torch.as_tensor(baseline.advantages(rewards), dtype=torch.float32)
            loss = batch.backward(adv, entropy_coef)
            nn.utils.clip_grad_norm_(params, max_grad_norm)
            optimizer.step()
        curve.append(
            dict(
                update=len(curve),
                evaluations=tracker.used,
                mean_reward=float(rewards.mean()),
                max_reward=float(rewards.max()),
                best_latency=tracker.best_latency,
                loss=loss,
            )
        )
    return curve
