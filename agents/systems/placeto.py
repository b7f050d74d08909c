"""Placeto: iterative placement with graph embeddings (Addanki et al., NeurIPS 2019).

Paper: R. Addanki, S. Bojja Venkatakrishnan, S. Gupta, H. Mao, M. Alizadeh. "Placeto: Learning
Generalizable Device Placement Algorithms for Distributed Machine Learning." NeurIPS 2019. Released code:
github.com/aravic/generalizable-device-placement (``model/``: ``progressive_placer.py``, ``pgraph.py``,
``mp_progressive_nn.py``, ``rl_params.py``, ``hyperparameters.txt``).

As in the paper and its code:

* an episode starts from an initial placement (the code's default: one random placement, the same for
  every episode; here drawn once from the seed) and visits the groups one at a time in topological order;
  at each step the policy picks a device for the visited group, which may change its placement;
* the state of a node: its static features, its compute time on every device (the paper's runtime
  feature; here from the problem's cost model, relative to the graph's total), its current device
  (one-hot), whether it has been visited in this episode ("done") and whether it is the current node;
* the embedding: message passing from parents to children (forward) and from children to parents
  (backward), 8 rounds each (``hyperparameters.txt``), weights shared across rounds; then, relative to
  the current node, separate mean pools over its ancestors, its descendants and the parallel nodes
  (neither), concatenated with the node's own embedding and fed to the policy head;
* REINFORCE with a per-step baseline: the mean return at that step over the last 10 episodes
  (``turn_based_baseline``, ``bl_n_rnds`` = 10 in ``hyperparameters.txt``), an entropy bonus, Adam at
  learning rate 1e-3 (``rl_params.py``; ``hyperparameters.txt`` decays it to 1e-4 over training);
* the one-shot episodic reward of the code (``one_shot_episodic_rew``): every step gets the final
  placement's reward, so an episode costs one evaluation.

Nothing in the policy depends on the graph's size, so a policy trained on one graph places unseen graphs
(``Placeto(policy=trained, train=False)``). ``K`` episodes are rolled out in parallel per update.

Deviations:

* Reward: the one-shot option of the released code, with the problem's reward of the final placement
  (speedup over the best single device minus 1, infeasible -1) in place of minus its runtime (both
  decrease with the runtime); not the paper's per-step runtime improvement, which
  would cost one evaluation per step (``G`` per episode) against the evaluation budget. No memory
  penalty: the backend reports over-full devices as infeasible.
* Message passing is 8 synchronous rounds in each direction (mean over parents / children), not full
  sweeps in topological order; the ancestor / descendant / parallel pools are plain means.
* No start-time feature (it needs a schedule of every intermediate placement, one simulation per step);
  the state also holds the project's static group features, and node embeddings are 32 wide after an
  input layer (the code's messages keep the width of its 5 + D input features); its parent, child and
  parallel aggregators are small networks, here means.
* 20 episodes per update (the code runs 4 to 8 workers, one episode each).
* Devices that cannot hold a group's weights and outputs are masked out (``problem.device_mask``).
* The learning rate is constant; the entropy weight is 0.01 against rewards of order 1 (the code's 1.0
  weighs rewards in seconds of its simulator).
* Log-probabilities are recomputed after the rollout in chunks of steps (same gradient, bounded memory).
* On a deterministic backend a placement sampled again is looked up rather than re-measured.
"""

from __future__ import annotations

import copy
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from agents.base import BudgetTracker, PlacementMethod
from agents.systems.common import (
    DEFAULT_BUDGET,
    SampleBatch,
    budget_of,
    graph_tensors,
    make_generator,
    reinforce,
    sample_categorical,
    seeded_module,
    torch_threads,
    training_extras,
)
from placement_gym.errors import PlacementError
from placement_gym.problem import PlacementProblem

_CHUNK_ROWS = 100_000  # node rows per log-prob recomputation chunk (bounds autograd memory)


class PlacetoGraph:
    """What Placeto's state is built from: features, edges, reachability and the initial placement.

    Args:
        problem: The placement problem.
        initial: ``(G,)`` initial placement of every episode.
    """

    def __init__(self, problem: PlacementProblem, initial: np.ndarray) -> None:
        base = graph_tensors(problem)
        compute = np.asarray(problem.cost_model().compute, dtype=np.float64)  # (G, D)
        compute = np.where(np.isfinite(compute), compute, np.nan)
        total = np.nansum(compute, axis=0, keepdims=True)  # (1, D): each device's single-device time
        runtime = np.nan_to_num(compute / np.where(total > 0, total, 1.0), nan=1.0)  # (G, D), unrunnable = 1
        self.x = torch.cat([base.x, torch.as_tensor(runtime, dtype=torch.float32)], dim=-1)  # (G, F + D)
        self.edge_index = base.edge_index
        self.device_mask = base.device_mask
        g = base.num_nodes
        reach = np.zeros((g, g), dtype=bool)  # reach[i, j]: j is a descendant of i
        src, dst = base.edge_index.numpy()
        children = [dst[src == i] for i in range(g)]
        for i in reversed(range(g)):  # topological order: children are complete before their parents
            for j in children[i]:
                reach[i, j] = True
                reach[i] |= reach[j]
        self.descendants = torch.as_tensor(reach, dtype=torch.float32)  # (G, G)
        self.ancestors = self.descendants.T.contiguous()
        self.parallel = 1.0 - self.descendants - self.ancestors - torch.eye(g)
        self.initial = torch.as_tensor(initial, dtype=torch.long)

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_devices(self) -> int:
        return int(self.device_mask.shape[1])


class _EdgeSum(torch.autograd.Function):
    """``zeros.index_add_(1, dst, x.index_select(1, src))`` for ``x`` of shape ``(B, G, H)``: each node's
    sum over its edges, added in edge order, and the gradient of that expression computed as autograd
    computes it (``grad.index_select(1, dst)``, then ``zeros.index_add_(1, src, ...)``).

    Gathering and scattering along the node dimension copies or adds ``B`` strided slices per edge; here
    the same copies and additions run on the ``(B * G, H)`` rows, with the rows of sample ``b``'s edges in
    edge order, so every sum takes its terms in the same order and the result has the same bits.
    """

    @staticmethod
    def _rows(index: torch.Tensor, b: int, g: int) -> torch.Tensor:
        return (torch.arange(b).view(-1, 1) * g + index.view(1, -1)).view(-1)

    @staticmethod
    def _gather_add(x: torch.Tensor, take: torch.Tensor, put: torch.Tensor) -> torch.Tensor:
        b, g, h = x.shape
        out = torch.zeros(b, g, h)
        out.view(b * g, h).index_add_(0, put, x.reshape(b * g, h).index_select(0, take))
        return out

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        b, g, _ = x.shape
        rows_src, rows_dst = _EdgeSum._rows(src, b, g), _EdgeSum._rows(dst, b, g)
        ctx.save_for_backward(rows_src, rows_dst)
        return _EdgeSum._gather_add(x, rows_src, rows_dst)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        rows_src, rows_dst = ctx.saved_tensors
        return _EdgeSum._gather_add(grad, rows_dst, rows_src), None, None


def _edge_sum(x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """``zeros.index_add_(1, dst, x.index_select(1, src))``: with autograd (large batches of the update's
    recomputation) as :class:`_EdgeSum`; without (the rollout's batches of ``K`` states, where building
    the row indices costs more than the strided copies) as written."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _EdgeSum.apply(x, src, dst)
    return torch.zeros_like(x).index_add_(1, dst, x.index_select(1, src))


class PlacetoPolicy(nn.Module):
    """Message-passing state embedding, ancestor/descendant/parallel pooling and a device head.

    Args:
        feat_dim: Static node feature size ``F`` (runtime columns included).
        num_devices: ``D``.
        hidden: Width ``H``.
        rounds: Message-passing rounds per direction.
    """

    def __init__(self, feat_dim: int, num_devices: int, hidden: int = 32, rounds: int = 8) -> None:
        super().__init__()
        self.feat_dim, self.num_devices, self.rounds = feat_dim, num_devices, rounds
        self.inp = nn.Linear(feat_dim + num_devices + 2, hidden)
        self.fwd = nn.Linear(2 * hidden, hidden)
        self.bwd = nn.Linear(2 * hidden, hidden)
        self.head = nn.Sequential(nn.Linear(8 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_devices))

    @staticmethod
    def _linear_relu(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """``relu(layer(x))`` of a ``(B, G, in)`` input as ``(B, G, out)``.

        A linear layer flattens a 3-D input to ``(B * G, in)`` rows for one matrix product and returns a
        view of the result; ReLU in place on that view would make autograd clone and copy back the whole
        gradient (``CopySlices``). Flattening here and applying ReLU in place to the product itself runs
        the same product and the same ReLU backward without that copy.
        """
        b, g, _ = x.shape
        return torch.relu_(layer(x.reshape(b * g, -1))).view(b, g, -1)

    def logits(
        self, graph: PlacetoGraph, placement: torch.Tensor, done: torch.Tensor, current: torch.Tensor
    ) -> torch.Tensor:
        """Device logits of the current node in each of ``B`` states.

        Args:
            graph: The group graph (``G`` nodes).
            placement: ``(B, G)`` int64 current device of every node.
            done: ``(B, G)`` float, 1 for nodes visited in this episode.
            current: ``(B,)`` int64 index of the node to place in each state.

        Returns:
            ``(B, D)`` logits.
        """
        b, g = placement.shape
        cur = F.one_hot(current, g).float().unsqueeze(-1)  # (B, G, 1)
        state = torch.cat(
            [
                graph.x.expand(b, -1, -1),
                F.one_hot(placement, self.num_devices).float(),
                done.unsqueeze(-1),
                cur,
            ],
            dim=-1,
        )  # (B, G, F + D + 2)
        # Same values as ``x[:, src]``, ``index_add`` and out-of-place ReLU and division, with fewer large
        # allocations: gathering the edges' sources is a plain copy (its backward adds edge by edge in edge
        # order, as indexing's does; see :func:`_edge_sum`), and a linear layer's backward needs its input,
        # not its output, so ReLU may overwrite the output. tests/agents/test_systems.py checks the logits
        # and gradients bit for bit.
        h0 = self._linear_relu(self.inp, state)
        src, dst = graph.edge_index
        in_deg = torch.bincount(dst, minlength=g).clamp(min=1).float().view(1, g, 1)
        out_deg = torch.bincount(src, minlength=g).clamp(min=1).float().view(1, g, 1)
        fwd = bwd = h0
        for _ in range(self.rounds):
            agg = _edge_sum(fwd, src, dst).div_(in_deg)  # parents
            fwd = self._linear_relu(self.fwd, torch.cat([fwd, agg], dim=-1))
            agg = _edge_sum(bwd, dst, src).div_(out_deg)  # children
            bwd = self._linear_relu(self.bwd, torch.cat([bwd, agg], dim=-1))
        emb = torch.cat([fwd, bwd], dim=-1)  # (B, G, 2H)
        pools = [emb[torch.arange(b), current]]
        for rel in (graph.ancestors, graph.descendants, graph.parallel):
            weights = rel[current]  # (B, G)
            pools.append(
                torch.bmm(weights.unsqueeze(1), emb).squeeze(1) / weights.sum(-1, keepdim=True).clamp(min=1)
            )
        return self.head(torch.cat(pools, dim=-1))


def rollout(
    policy: PlacetoPolicy, graph: PlacetoGraph, k: int, generator: torch.Generator, greedy: bool = False
) -> np.ndarray:
    """Run ``k`` episodes without gradients: ``(k, G)`` int64 final placements (the actions taken)."""
    g = graph.num_nodes
    placement = graph.initial.expand(k, -1).clone()
    done = torch.zeros(k, g)
    with torch.no_grad():
        for t in range(g):
            logits = policy.logits(graph, placement, done, torch.full((k,), t, dtype=torch.long))
            a, _, _ = sample_categorical(logits, generator, graph.device_mask[t], greedy)
            placement[:, t] = a
            done[:, t] = 1.0
    return placement.numpy().astype(np.int64)


class _EpisodeBatch(SampleBatch):
    """Episodes whose log-probabilities are recomputed, step chunk by step chunk, at update time."""

    def __init__(self, placements: np.ndarray, policy: PlacetoPolicy, graph: PlacetoGraph) -> None:
        super().__init__(placements)
        self.policy, self.graph = policy, graph

    def backward(self, advantages: torch.Tensor, entropy_coef: float) -> float:
        k, g = self.placements.shape
        actions = torch.as_tensor(self.placements)  # (k, G); step t sets node t
        chunk = max(1, _CHUNK_ROWS // max(k * g, 1))
        total = 0.0
        for start in range(0, g, chunk):
            steps = torch.arange(start, min(start + chunk, g))
            before = (torch.arange(g).view(1, g) < steps.view(-1, 1)).unsqueeze(1)  # (c, 1, G)
            placement = torch.where(
                before, actions.unsqueeze(0), self.graph.initial.view(1, 1, g)
            )  # (c, k, G)
            done = before.float().expand(-1, k, -1).reshape(-1, g)
            current = steps.repeat_interleave(k)  # (c*k,)
            logits = self.policy.logits(self.graph, placement.reshape(-1, g), done, current)
            logits = logits.masked_fill(~self.graph.device_mask[current], -1e9)
            logp = torch.log_softmax(logits, dim=-1)
            chosen = logp.gather(-1, actions[:, steps].T.reshape(-1, 1)).squeeze(-1)  # (c*k,)
            loss = -(advantages.repeat(len(steps)) * chosen).sum() / k
            if entropy_coef:
                loss = loss + entropy_coef * (logp.exp() * logp).sum() / k
            loss.backward()
            total += float(loss.detach())
        return total


class WindowBaseline:
    """Placeto's per-step baseline: the mean return over the last ``window`` episodes (the current
    batch's included). With the one-shot reward every step has the episode's return, so the per-step
    baselines are one number.

    Args:
        window: Episodes averaged (the code's ``bl_n_rnds``; ``hyperparameters.txt``: 10).
    """

    def __init__(self, window: int = 10) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.returns: deque[float] = deque(maxlen=window)

    def advantages(self, rewards: np.ndarray) -> np.ndarray:
        rewards = np.asarray(rewards, dtype=np.float64)
        self.returns.extend(rewards.tolist())
        return rewards - float(np.mean(self.returns))


class Placeto(PlacementMethod):
    """Addanki et al. (2019): iterative placement with a message-passing policy, REINFORCE.

    Args:
        policy: A trained :class:`PlacetoPolicy` to start from (e.g. ``result.extra["policy"]`` of a run
            on another graph); ``None`` builds a fresh one from the seed.
        train: Update the policy. ``False`` (needs ``policy``): evaluate the greedy episode, then spend any
            remaining budget on sampled episodes, without updates.
        samples_per_update: Episodes (= evaluated placements) per update.
        hidden: Embedding width.
        rounds: Message-passing rounds per direction (8).
        lr: Adam learning rate (1e-3).
        baseline_window: Episodes in the baseline (10).
        entropy_coef: Entropy bonus weight.
        default_budget: Evaluations when ``place`` gets ``budget=None``.
        num_threads: Torch intra-op threads while placing.
    """

    name = "placeto"
    track = "white-box"  # reads the cost model

    def __init__(
        self,
        policy: PlacetoPolicy | None = None,
        train: bool = True,
        samples_per_update: int = 20,
        hidden: int = 32,
        rounds: int = 8,
        lr: float = 1e-3,
        baseline_window: int = 10,
        entropy_coef: float = 0.01,
        default_budget: int = DEFAULT_BUDGET,
        num_threads: int = 1,
    ) -> None:
        if not train and policy is None:
            raise ValueError("Placeto(train=False) needs a trained policy= to place with")
        self.policy, self.train = policy, train
        self.samples_per_update, self.hidden, self.rounds, self.lr = samples_per_update, hidden, rounds, lr
        self.baseline_window, self.entropy_coef = baseline_window, entropy_coef
        self.default_budget, self.num_threads = default_budget, num_threads

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        with torch_threads(self.num_threads):
            return self._run(tracker, seed)

    def _run(self, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        problem = tracker.problem
        rng = np.random.default_rng(seed)
        mask = np.asarray(problem.device_mask)
        initial = np.array([rng.choice(np.flatnonzero(row)) for row in mask], dtype=np.int64)
        graph = PlacetoGraph(problem, initial)
        feat_dim = graph.x.shape[1]
        if self.policy is None:
            policy = seeded_module(
                lambda: PlacetoPolicy(feat_dim, graph.num_devices, self.hidden, self.rounds), seed
            )
        else:
            if (self.policy.feat_dim, self.policy.num_devices) != (feat_dim, graph.num_devices):
                raise PlacementError(
                    f"the given Placeto policy places on {self.policy.num_devices} devices with "
                    f"{self.policy.feat_dim} node features; this problem has {graph.num_devices} devices and "
                    f"{feat_dim} features"
                )
            policy = copy.deepcopy(self.policy)  # fine-tuning must not change the caller's policy
        gen = make_generator(seed)
        if not self.train:
            tracker.evaluate(rollout(policy, graph, 1, gen, greedy=True)[0])
            remaining = (tracker.budget or 1) - tracker.used
            if remaining > 0:
                tracker.evaluate_batch(rollout(policy, graph, remaining, gen))
            return {"curve": [], "policy": policy}
        budget = budget_of(tracker, self.default_budget)
        curve = reinforce(
            tracker,
            budget,
            lambda k: _EpisodeBatch(rollout(policy, graph, k, gen), policy, graph),
            torch.optim.Adam(policy.parameters(), lr=self.lr),
            self.samples_per_update,
            baseline=WindowBaseline(self.baseline_window),
            entropy_coef=self.entropy_coef,
        )
        return {**training_extras(curve, tracker, budget), "policy": policy}
