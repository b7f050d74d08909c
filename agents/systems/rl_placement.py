"""RL device placement with a sequence-to-sequence policy (Mirhoseini et al., ICML 2017).

Paper: A. Mirhoseini, H. Pham, Q. V. Le, B. Steiner, R. Larsen, Y. Zhou, N. Kumar, M. Norouzi, S. Bengio,
J. Dean. "Device Placement Optimization with Reinforcement Learning." ICML 2017. The 2017 code was not
released. Its training hyperparameters are those the authors restate in A. Mirhoseini et al., "A
Hierarchical Model for Device Placement", ICLR 2018 (same hyperparameters as 2017 for comparison): Adam
at a fixed learning rate 0.1, gradient norm clipped to 1.0, tanh constant C = 5, temperature T = 10.
What neither paper states comes from the authors' public TensorFlow controller
(``tensorflow/python/grappler/hierarchical_controller.py``): LSTM width 512 (bidirectional encoder of
2 x 256), forget-gate bias 1, logit noise of standard deviation 0.5 x the logits' RMS for the first 750
samples, a moving-average baseline with decay 0.9 that starts at the failing signal, reward
``sqrt(runtime)`` and a failing signal of 100 s.

The groups of the problem's coarse graph, in topological order, are embedded (op-type mix, output size,
adjacency) and read by the bidirectional LSTM encoder; an attentional LSTM decoder, fed the embedding of
the previous group's device, emits one device per group. Logits are divided by T, squashed to
``C * tanh(.)``, and noised while the noise lasts; log-probabilities are those of the logits sampled
from. REINFORCE minimises the square root of the runtime against the moving-average baseline, moved
after every sample as in the controller: each sample is judged against the average before it.

Deviations:

* ``K = 20`` placements per update (the ICLR 2018 placer uses k = 4): one pass over the LSTM weights
  then serves 20 samples, which makes this policy about 5x cheaper per evaluation on a CPU. Pass
  ``samples_per_update=4`` for the paper's value.
* Runtimes are divided by the best single-device latency before the square root (scale-free across
  graphs); the failing signal is 100 x that latency, the baseline starts at ``-sqrt(100)``.
* Groups are the problem's coarsening (fused layers by default), not TensorFlow co-location groups; the
  group embedding is the project's op-type mix, log output bytes and degrees (instead of a type index and
  padded output shapes) plus a learned 20-wide projection of each group's in/out adjacency row (the
  controller lists 20 neighbour indices).
* Attention is Luong's multiplicative ("general") attention rather than the controller's additive one,
  whose ``(K, G, 512)`` tanh tensor per decoding step must be kept for the backward pass (about 3 GB for
  BERT's 267 groups at ``K = 20``).
* Devices that cannot hold a group's weights and outputs are masked out (``problem.device_mask``); the
  controller samples every device and sees an over-full placement fail.
* The device embeddings start from torch's N(0, 1) initialisation, not Glorot's.
* On a deterministic backend a placement sampled again is looked up rather than re-measured (the budget
  counts distinct placements, see :func:`agents.systems.common.reinforce`).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from agents.base import BudgetTracker, PlacementMethod
from agents.systems.common import (
    DEFAULT_BUDGET,
    MovingAverageBaseline,
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
from placement_gym.errors import ConfigError, UnknownNameError
from placement_gym.features import NODE_FEATURES

#: Columns of the env's node features that the paper's embedding uses: output size, degrees, op-type mix.
_OP_COLUMNS = [
    i
    for i, name in enumerate(NODE_FEATURES)
    if name in ("log_out_bytes", "log_in_degree", "log_out_degree") or name.startswith("frac_")
]


class Exploration:
    """Exploration of the logits: temperature, tanh clipping (Mirhoseini et al. 2018), noise for the first
    samples (the TensorFlow controller).

    Args:
        temperature: Logits are divided by it.
        tanh_constant: Logits become ``tanh_constant * tanh(logits)`` (0: no clipping).
        noise_std: Noise standard deviation relative to the logits' root mean square (0: none).
        noise_samples: Samples drawn with noise (the controller's ``stop_noise_step``).
    """

    def __init__(
        self,
        temperature: float = 10.0,
        tanh_constant: float = 5.0,
        noise_std: float = 0.5,
        noise_samples: int = 750,
    ) -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if tanh_constant < 0 or noise_std < 0 or noise_samples < 0:
            raise ValueError("tanh_constant, noise_std and noise_samples must be >= 0")
        self.temperature, self.tanh_constant = temperature, tanh_constant
        self.noise_std, self.noise_samples = noise_std, noise_samples
        self.samples = 0  # drawn so far

    def __call__(self, logits: torch.Tensor, generator: torch.Generator, noisy: bool) -> torch.Tensor:
        logits = logits / self.temperature
        if self.tanh_constant > 0:
            logits = self.tanh_constant * torch.tanh(logits)
        if noisy and self.noise_std > 0:
            rms = logits.detach().pow(2).mean().sqrt()
            logits = logits + self.noise_std * rms * torch.randn(logits.shape, generator=generator)
        return logits

    def noisy(self) -> bool:
        """Whether the next batch is drawn with noise."""
        return self.samples < self.noise_samples


def _init_lstm(module: nn.Module, forget_bias: float) -> None:
    """Glorot-uniform weights, zero biases but ``forget_bias`` on the forget gates (as the controller)."""
    for name, param in module.named_parameters():
        if "weight" in name:
            nn.init.xavier_uniform_(param)
        elif "bias_ih" in name:
            nn.init.zeros_(param)
            h = param.shape[0] // 4
            nn.init.constant_(
                param[h : 2 * h], forget_bias
            )  # torch's gate order: input, forget, cell, output
        elif "bias" in name:
            nn.init.zeros_(param)


class Seq2SeqPlacer(nn.Module):
    """Bidirectional LSTM encoder over items, attentional LSTM decoder emitting one device per item.

    Args:
        in_dim: Item embedding size.
        hidden: Width ``H`` (the encoder has ``H/2`` per direction).
        num_devices: ``D``.
        forget_bias: Initial forget-gate bias.
    """

    def __init__(self, in_dim: int, hidden: int, num_devices: int, forget_bias: float = 1.0) -> None:
        super().__init__()
        if hidden % 2:
            raise ValueError(f"hidden must be even (two encoder directions), got {hidden}")
        self.num_devices = num_devices
        self.encoder = nn.LSTM(in_dim, hidden // 2, batch_first=True, bidirectional=True)
        self.device_embedding = nn.Embedding(num_devices + 1, hidden)  # index D = the "go" token
        self.decoder = nn.LSTMCell(hidden, hidden)
        self.attn = nn.Linear(hidden, hidden, bias=False)
        self.out = nn.Linear(2 * hidden, num_devices, bias=False)
        _init_lstm(self.encoder, forget_bias)
        _init_lstm(self.decoder, forget_bias)
        for weight in (self.attn.weight, self.out.weight):
            nn.init.xavier_uniform_(weight)

    def forward(
        self,
        items: torch.Tensor,
        generator: torch.Generator,
        exploration: Exploration,
        mask: torch.Tensor | None = None,
        greedy: bool = False,
        k: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Decode one device per item.

        Args:
            items: ``(k, T, in_dim)`` item embeddings (one sequence per sample), or ``(T, in_dim)`` shared
                by all ``k`` samples (encoded once, attended with matrix products).
            generator: Sampling randomness.
            exploration: Temperature, clipping and noise of the logits.
            mask: ``(T, D)`` bool allowed devices, or ``None``.
            greedy: Argmax decoding without noise.
            k: Samples, for shared ``items``.

        Returns:
            ``(devices (k, T) int64, log_prob (k,), entropy (k,))``.
        """
        shared = items.dim() == 2
        if shared:
            if k is None:
                raise ValueError("shared items (T, in_dim) need the number of samples k")
            items = items.unsqueeze(0)
        k = items.shape[0] if not shared else k
        t_len = items.shape[1]
        noisy = not greedy and exploration.noisy()
        enc, (h, c) = self.encoder(items)  # enc (k or 1, T, H); h, c (2, k or 1, H/2)
        h, c = h.transpose(0, 1).reshape(-1, enc.shape[-1]), c.transpose(0, 1).reshape(-1, enc.shape[-1])
        h, c = h.expand(k, -1), c.expand(k, -1)  # (k, H): forward | backward
        prev = torch.full((k,), self.num_devices, dtype=torch.long)
        cell = self.decoder
        # The decoder's input is one of D + 1 device embeddings: project them once, not at every step.
        table = self.device_embedding.weight @ cell.weight_ih.T + cell.bias_ih  # (D + 1, 4H)
        actions, logps, ents = [], [], []
        shared_enc = enc[0] if shared else None  # (T, H), selected once
        for t in range(t_len):
            gates = table[prev] + h @ cell.weight_hh.T + cell.bias_hh  # (k, 4H): input, forget, cell, output
            i, f, g, o = gates.chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            if shared:
                weights = torch.softmax(self.attn(h) @ shared_enc.T, dim=-1)  # (k, T)
                context = weights @ shared_enc  # (k, H)
            else:
                weights = torch.softmax(
                    torch.bmm(enc, self.attn(h).unsqueeze(-1)).squeeze(-1), dim=-1
                )  # (k, T)
                context = torch.bmm(weights.unsqueeze(1), enc).squeeze(1)  # (k, H)
            logits = exploration(self.out(torch.cat([h, context], dim=-1)), generator, noisy)  # (k, D)
            a, lp, en = sample_categorical(logits, generator, None if mask is None else mask[t], greedy)
            actions.append(a)
            logps.append(lp)
            ents.append(en)
            prev = a
        if not greedy:
            exploration.samples += k
        return torch.stack(actions, 1), torch.stack(logps, 1).sum(1), torch.stack(ents, 1).sum(1)


class RLPolicy(nn.Module):
    """The paper's embedding of groups (op types, output size, adjacency) feeding a :class:`Seq2SeqPlacer`.

    Args:
        num_groups: ``G`` (the adjacency projection is specific to one graph, as in the paper).
        num_devices: ``D``.
        hidden: Width ``H``.
        adj_dim: Size of the adjacency embedding (the controller's ``adj_embed_dim``: 20).
    """

    def __init__(self, num_groups: int, num_devices: int, hidden: int = 512, adj_dim: int = 20) -> None:
        super().__init__()
        self.adjacency = nn.Linear(2 * num_groups, adj_dim, bias=False)
        self.placer = Seq2SeqPlacer(len(_OP_COLUMNS) + adj_dim, hidden, num_devices)

    def embed(self, x: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
        """``(G, len(_OP_COLUMNS) + adj_dim)`` group embeddings from features ``x`` and ``(G, 2G)`` adjacency."""
        return torch.cat([x[:, _OP_COLUMNS], self.adjacency(adjacency)], dim=-1)


def _adjacency_rows(edge_index: torch.Tensor, g: int) -> torch.Tensor:
    """``(G, 2G)``: row ``i`` holds ``i``'s predecessors (first half) and successors (second half)."""
    adj = torch.zeros(g, 2 * g)
    src, dst = edge_index
    adj[dst, src] = 1.0
    adj[src, g + dst] = 1.0
    return adj


def sqrt_runtime_reward(single_latency: float, failing_ratio: float):
    """``reward(placement, latency, env_reward) = -sqrt(latency / single_latency)``; failures cost
    ``-sqrt(failing_ratio)``."""

    def reward(placement: np.ndarray, latency: float, env_reward: float) -> float:
        return -math.sqrt(latency / single_latency if math.isfinite(latency) else failing_ratio)

    return reward


class RLPlacement(PlacementMethod):
    """Mirhoseini et al. (2017): seq2seq policy over groups trained with REINFORCE.

    Args:
        samples_per_update: ``K`` placements sampled (and evaluated) per policy update.
        hidden: LSTM width (512).
        lr: Adam learning rate (0.1, fixed).
        baseline_decay: Decay of the moving-average reward baseline (0.9).
        temperature, tanh_constant, noise_std, noise_samples: Exploration (see :class:`Exploration`).
        reward: ``"sqrt_runtime"`` (the paper's, see module docstring) or ``"env"``.
        failing_ratio: Runtime, relative to the best single device, charged to a failing placement (100).
        max_grad_norm: Gradient-norm clip (1.0).
        default_budget: Evaluations when ``place`` gets ``budget=None``.
        num_threads: Torch intra-op threads while placing.
    """

    name = "rl_placement"

    def __init__(
        self,
        samples_per_update: int = 20,
        hidden: int = 512,
        lr: float = 0.1,
        baseline_decay: float = 0.9,
        temperature: float = 10.0,
        tanh_constant: float = 5.0,
        noise_std: float = 0.5,
        noise_samples: int = 750,
        reward: str = "sqrt_runtime",
        failing_ratio: float = 100.0,
        max_grad_norm: float = 1.0,
        default_budget: int = DEFAULT_BUDGET,
        num_threads: int = 1,
    ) -> None:
        if reward not in ("sqrt_runtime", "env"):
            raise UnknownNameError("rl_placement reward", reward, ["env", "sqrt_runtime"])
        if hidden % 2:  # checked here, not first when the policy is built mid-run
            raise ConfigError(f"rl_placement hidden must be even (two encoder directions), got {hidden}")
        self.samples_per_update, self.hidden, self.lr = samples_per_update, hidden, lr
        self.baseline_decay = baseline_decay
        self.exploration = dict(
            temperature=temperature,
            tanh_constant=tanh_constant,
            noise_std=noise_std,
            noise_samples=noise_samples,
        )
        Exploration(**self.exploration)  # fail on bad values at construction
        self.reward, self.failing_ratio, self.max_grad_norm = reward, failing_ratio, max_grad_norm
        self.default_budget, self.num_threads = default_budget, num_threads

    def _place(self, env: gym.Env, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        with torch_threads(self.num_threads):
            return self._train(tracker, seed)

    def _train(self, tracker: BudgetTracker, seed: int) -> dict[str, Any]:
        graph = graph_tensors(tracker.problem)
        g, d = graph.num_nodes, graph.num_devices
        policy = seeded_module(lambda: RLPolicy(g, d, self.hidden), seed)
        gen = make_generator(seed)
        adjacency = _adjacency_rows(graph.edge_index, g)
        exploration = Exploration(**self.exploration)

        def sample(k: int) -> SampleBatch:
            items = policy.embed(graph.x, adjacency)  # (G, F), the same for every sample
            devices, logp, ent = policy.placer(items, gen, exploration, graph.device_mask, k=k)
            return SampleBatch(devices.numpy().astype(np.int64), logp, ent)

        if self.reward == "sqrt_runtime":
            reward = sqrt_runtime_reward(tracker.problem.baseline.latency, self.failing_ratio)
            baseline = MovingAverageBaseline(
                self.baseline_decay, normalize=False, init=-math.sqrt(self.failing_ratio), per_sample=True
            )
        else:
            reward, baseline = None, MovingAverageBaseline(self.baseline_decay, normalize=False)
        optimizer = torch.optim.Adam(policy.parameters(), lr=self.lr)
        budget = budget_of(tracker, self.default_budget)
        curve = reinforce(
            tracker,
            budget,
            sample,
            optimizer,
            self.samples_per_update,
            reward=reward,
            baseline=baseline,
            max_grad_norm=self.max_grad_norm,
        )
        return {**training_extras(curve, tracker, budget), "policy": policy, "reward": self.reward}
